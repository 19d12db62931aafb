package webhook

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

var (
	// controller-runtime's controller_runtime_webhook_requests_total counts
	// HTTP codes, and an admission webhook answers 200 even when it fails
	// the request: this counts what the answers said.
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "flotilla_webhook_requests_total",
		Help: "Pods the pod webhook answered, by result: allowed, denied (refused, or a request it could not read), error (it could not decide; the API server then refuses the pod).",
	}, []string{"result"})

	certExpiry = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "flotilla_webhook_cert_expiry_timestamp_seconds",
		Help: "When the serving certificate this replica's webhook serves expires (Unix seconds), as copied from the Secret the leading agent rotates; absent until one is served.",
	})
)

func init() {
	metrics.Registry.MustRegister(requests, certExpiry)
	// Each result is exported from the start, at 0, so that a rate sees
	// the first error too.
	for _, result := range []string{"allowed", "denied", "error"} {
		requests.WithLabelValues(result)
	}
}

// counted counts the answers of h in flotilla_webhook_requests_total.
func counted(h admission.Handler) admission.Handler {
	return admission.HandlerFunc(func(ctx context.Context, req admission.Request) admission.Response {
		resp := h.Handle(ctx, req)
		requests.WithLabelValues(resultOf(resp)).Inc()
		return resp
	})
}

// resultOf is the result label of an answer.
func resultOf(resp admission.Response) string {
	switch {
	case resp.Allowed:
		return "allowed"
	case resp.Result != nil && resp.Result.Code >= http.StatusInternalServerError:
		return "error"
	default:
		return "denied"
	}
}

// observeCertExpiry sets flotilla_webhook_cert_expiry_timestamp_seconds from
// the first certificate of a PEM chain; one that does not parse is left out.
func observeCertExpiry(chain []byte) {
	block, _ := pem.Decode(chain)
	if block == nil {
		return
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return
	}
	certExpiry.Set(float64(cert.NotAfter.Unix()))
}
