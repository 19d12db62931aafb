package webhook

import (
	"bytes"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
)

// issue makes a CA and a serving pair for localhost as the rotator does, in
// the keys of its Secret.
func issue(t *testing.T) map[string][]byte {
	t.Helper()
	r := &rotator.CertRotator{CAName: "test-ca", DNSName: "localhost", ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	now := time.Now()
	ca, err := r.CreateCACert(now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := r.CreateCertPEM(ca, now, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{caCertKey: ca.CertPEM, "ca.key": ca.KeyPEM, certKey: cert, keyKey: key}
}

func TestWriteServingFiles(t *testing.T) {
	first, second := issue(t), issue(t)
	mismatched := map[string][]byte{caCertKey: first[caCertKey], certKey: first[certKey], keyKey: second[keyKey]}
	for _, tc := range []struct {
		name        string
		on          map[string][]byte // already on disk
		secret      map[string][]byte
		wantWritten bool
		wantErr     bool
		wantNotYet  bool
		wantOnDisk  map[string][]byte
	}{
		{name: "first pair", secret: first, wantWritten: true, wantOnDisk: first},
		{name: "same pair: nothing to write", on: first, secret: first, wantOnDisk: first},
		{name: "rotated pair replaces the old one", on: first, secret: second, wantWritten: true, wantOnDisk: second},
		{name: "empty Secret: not issued yet", secret: map[string][]byte{}, wantNotYet: true},
		{name: "empty Secret keeps the files", on: first, secret: nil, wantNotYet: true, wantOnDisk: first},
		{name: "a key of another pair is refused", on: first, secret: mismatched, wantErr: true, wantOnDisk: first},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "certs")
			if tc.on != nil {
				if _, err := writeServingFiles(dir, tc.on); err != nil {
					t.Fatal(err)
				}
			}
			written, err := writeServingFiles(dir, tc.secret)
			switch {
			case tc.wantNotYet:
				if !errors.Is(err, errNotIssued) {
					t.Fatalf("err = %v, want errNotIssued", err)
				}
			case tc.wantErr:
				if err == nil || errors.Is(err, errNotIssued) {
					t.Fatalf("err = %v, want a refusal", err)
				}
			case err != nil:
				t.Fatal(err)
			}
			if written != tc.wantWritten {
				t.Errorf("written = %v, want %v", written, tc.wantWritten)
			}
			for _, name := range []string{caCertKey, certKey, keyKey} {
				got, err := os.ReadFile(filepath.Join(dir, name))
				if tc.wantOnDisk == nil {
					if err == nil {
						t.Errorf("%s written", name)
					}
					continue
				}
				if err != nil || !bytes.Equal(got, tc.wantOnDisk[name]) {
					t.Errorf("%s on disk is not the expected one (err %v)", name, err)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "ca.key")); err == nil {
				t.Error("the CA's key was copied to the serving files")
			}
		})
	}
}
