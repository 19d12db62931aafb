package webhook

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func TestRequestsCountedByResult(t *testing.T) {
	for _, tc := range []struct {
		name string
		resp admission.Response
		want string
	}{
		{"allowed", admission.Allowed(""), "allowed"},
		{"patched", admission.Patched("saved the spec"), "allowed"},
		{"denied", admission.Denied("no"), "denied"},
		{"unreadable request", admission.Errored(http.StatusBadRequest, errors.New("decoding pod")), "denied"},
		{"could not decide", admission.Errored(http.StatusInternalServerError, errors.New("reading the workload")), "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(requests.WithLabelValues(tc.want))
			h := counted(admission.HandlerFunc(func(context.Context, admission.Request) admission.Response { return tc.resp }))
			if got := h.Handle(t.Context(), admission.Request{}); got.Allowed != tc.resp.Allowed {
				t.Fatalf("the answer changed: allowed %t, want %t", got.Allowed, tc.resp.Allowed)
			}
			if after := testutil.ToFloat64(requests.WithLabelValues(tc.want)); after != before+1 {
				t.Errorf("flotilla_webhook_requests_total{result=%q} went from %v to %v, want one more", tc.want, before, after)
			}
		})
	}
}

func TestCertExpiryObserved(t *testing.T) {
	notAfter := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agent"},
		NotBefore: notAfter.Add(-time.Hour), NotAfter: notAfter,
	}, &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agent"}}, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certExpiry.Set(0)
	observeCertExpiry([]byte("not PEM"))
	if got := testutil.ToFloat64(certExpiry); got != 0 {
		t.Fatalf("a chain that does not parse set the expiry to %v", got)
	}
	observeCertExpiry(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	if got, want := testutil.ToFloat64(certExpiry), float64(notAfter.Unix()); got != want {
		t.Errorf("flotilla_webhook_cert_expiry_timestamp_seconds = %v, want %v", got, want)
	}
}
