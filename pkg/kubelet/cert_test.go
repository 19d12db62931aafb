package kubelet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net"
	"reflect"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

func TestSelfSigned(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		address string
		ips     []net.IP
		dns     []string
	}{
		{"10.1.2.3", []net.IP{net.ParseIP("10.1.2.3").To4()}, []string{"localhost"}},
		{"fd00::1", []net.IP{net.ParseIP("fd00::1")}, []string{"localhost"}},
		{"agent.example", nil, []string{"localhost", "agent.example"}},
		{"", nil, []string{"localhost"}},
	} {
		pair, err := selfSigned(tc.address, now)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		ips := cert.IPAddresses
		if len(ips) != len(tc.ips) || (len(ips) > 0 && !ips[0].Equal(tc.ips[0])) || !reflect.DeepEqual(cert.DNSNames, tc.dns) {
			t.Errorf("address %q: IPs %v, DNS %v; want %v, %v", tc.address, ips, cert.DNSNames, tc.ips, tc.dns)
		}
		if !reflect.DeepEqual(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || cert.NotAfter.Before(now.Add(300*24*time.Hour)) {
			t.Errorf("address %q: usage %v, valid until %s", tc.address, cert.ExtKeyUsage, cert.NotAfter)
		}
	}
}

// TestReloading serves the files' current certificate, parsed again only
// when it changes.
func TestReloading(t *testing.T) {
	pemOf := func(address string) (certPEM, keyPEM []byte) {
		pair, err := selfSigned(address, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(pair.PrivateKey.(*ecdsa.PrivateKey))
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pair.Certificate[0]}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	}
	content := &fakeCertKey{}
	content.cert, content.key = pemOf("10.0.0.1")
	r := &reloading{content: content}
	first, err := r.get(nil)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := r.get(nil); again != first {
		t.Error("an unchanged certificate was parsed again")
	}
	content.cert, content.key = pemOf("10.0.0.2")
	second, err := r.get(nil)
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Error("the new certificate is not served")
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherDER, _ := x509.MarshalECPrivateKey(other)
	content.key = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: otherDER})
	if _, err := r.get(nil); err == nil {
		t.Error("a certificate with another key was served")
	}
}

type fakeCertKey struct{ cert, key []byte }

func (f *fakeCertKey) Name() string                             { return "fake" }
func (f *fakeCertKey) CurrentCertKeyContent() ([]byte, []byte)  { return f.cert, f.key }
func (f *fakeCertKey) AddListener(dynamiccertificates.Listener) {}
