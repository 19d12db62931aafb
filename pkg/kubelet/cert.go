package kubelet

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// selfSignedValidity is how long a generated serving certificate lasts; a
// new one is made at every start.
const selfSignedValidity = 365 * 24 * time.Hour

// servingTLS is the TLS configuration of the server: the certificate of
// CertFile/KeyFile, read again when the files change, or else a
// self-signed one for Address. Client certificates are asked for, not
// required: the authenticator checks them against the source's client CA,
// which can change while the agent runs, and tokens are accepted too.
func (s *Server) servingTLS() (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ClientAuth: tls.RequestClientCert,
		NextProtos: []string{"http/1.1"},
	}
	switch {
	case s.cfg.CertFile != "" || s.cfg.KeyFile != "":
		if s.cfg.CertFile == "" || s.cfg.KeyFile == "" {
			return nil, errors.New("kubelet API: a serving certificate needs both its certificate and its key file")
		}
		content, err := dynamiccertificates.NewDynamicServingContentFromFiles("kubelet-api-serving", s.cfg.CertFile, s.cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kubelet API: serving certificate: %w", err)
		}
		s.starters = append(s.starters, func(ctx context.Context) { go content.Run(ctx, 1) })
		cfg.GetCertificate = (&reloading{content: content}).get
	default:
		cert, err := selfSigned(s.cfg.Address, time.Now())
		if err != nil {
			return nil, fmt.Errorf("kubelet API: generating a serving certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// reloading serves the current certificate of files that may change,
// parsing it again only when it did.
type reloading struct {
	content dynamiccertificates.CertKeyContentProvider

	mu       sync.Mutex
	certPEM  []byte
	keyPEM   []byte
	certPair *tls.Certificate
}

func (r *reloading) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	certPEM, keyPEM := r.content.CurrentCertKeyContent()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.certPair != nil && bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM) {
		return r.certPair, nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("kubelet API: serving certificate: %w", err)
	}
	r.certPEM, r.keyPEM, r.certPair = certPEM, keyPEM, &pair
	return r.certPair, nil
}

// selfSigned makes a serving certificate for the published address (an IP
// SAN, as a kubelet's own self-signed certificate has). API servers check
// it only with --kubelet-certificate-authority, which no self-signed
// certificate can satisfy (docs/operations.md).
func selfSigned(address string, now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "flotilla-virtual-kubelet"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(selfSignedValidity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              []string{"localhost"},
	}
	if ip := net.ParseIP(address); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else if address != "" {
		tmpl.DNSNames = append(tmpl.DNSNames, address)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
