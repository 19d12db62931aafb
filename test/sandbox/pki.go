package sandbox

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the files a cluster's control plane authenticates with: a CA, the
// API server's serving and kubelet client certificates signed by it, the
// service-account signing key, and a static token file with one
// cluster-admin token.
type pki struct {
	caCert      []byte // PEM
	caCertPath  string
	servingCert string
	servingKey  string
	// kubeletClientCert and kubeletClientKey are the API server's client
	// certificate towards kubelets (and the agents' kubelet API).
	kubeletClientCert string
	kubeletClientKey  string
	saKey             string // RSA private key, PEM
	saPub             string
	tokenFile         string
	adminToken        string
	caKey             *ecdsa.PrivateKey
	caCertificate     *x509.Certificate
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		caCertPath:  filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),

		kubeletClientCert: filepath.Join(dir, "apiserver-kubelet-client.crt"),
		kubeletClientKey:  filepath.Join(dir, "apiserver-kubelet-client.key"),
		saKey:             filepath.Join(dir, "sa.key"),
		saPub:             filepath.Join(dir, "sa.pub"),
		tokenFile:         filepath.Join(dir, "tokens.csv"),
	}
	if err := p.writeCA(); err != nil {
		return nil, fmt.Errorf("creating CA: %w", err)
	}
	if err := p.writeServing(); err != nil {
		return nil, fmt.Errorf("creating serving certificate: %w", err)
	}
	if err := p.writeKubeletClient(); err != nil {
		return nil, fmt.Errorf("creating the kubelet client certificate: %w", err)
	}
	if err := p.writeServiceAccountKey(); err != nil {
		return nil, fmt.Errorf("creating service-account key: %w", err)
	}
	token, err := randomHex(24)
	if err != nil {
		return nil, err
	}
	p.adminToken = token
	line := fmt.Sprintf("%s,sandbox-admin,sandbox-admin,\"system:masters\"\n", token)
	if err := os.WriteFile(p.tokenFile, []byte(line), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) writeCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "flotilla-sandbox-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	p.caKey, p.caCertificate = key, cert
	p.caCert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return os.WriteFile(p.caCertPath, p.caCert, 0o644)
}

func (p *pki) writeServing() error {
	return p.writeLeaf(p.servingCert, p.servingKey, &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	})
}

// writeKubeletClient is the certificate the API server presents to
// kubelets (--kubelet-client-certificate), as kubeadm's
// apiserver-kubelet-client: signed by the CA of --client-ca-file, in a
// group allowed nodes/proxy.
func (p *pki) writeKubeletClient() error {
	return p.writeLeaf(p.kubeletClientCert, p.kubeletClientKey, &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// writeLeaf signs tmpl with the CA for ten years and writes it and its key.
func (p *pki) writeLeaf(certPath, keyPath string, tmpl *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(10 * 365 * 24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCertificate, &key.PublicKey, p.caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

func (p *pki) writeServiceAccountKey() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
