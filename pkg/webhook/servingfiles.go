package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
)

// The keys of the Secret, as cert-controller's rotator writes them, which are
// also the file names controller-runtime's webhook server reads by default.
const (
	caCertKey = "ca.crt"
	certKey   = "tls.crt"
	keyKey    = "tls.key"
)

// errNotIssued says the rotator has not written a serving pair yet.
var errNotIssued = errors.New("no serving certificate issued yet")

// servingFiles keeps this replica's serving certificate files equal to the
// Secret the rotator writes, so every replica serves the same certificate
// and controller-runtime's certwatcher reloads it after a rotation. The
// rotator itself expects the Secret mounted as a volume, which kubelet
// refreshes a minute or more after a rotation, and which an agent outside
// a cluster does not have.
type servingFiles struct {
	kube   kubernetes.Interface
	secret types.NamespacedName
	dir    string

	mu    sync.Mutex
	roots *x509.CertPool // the CA of the pair on disk; nil before the first

	synced     chan struct{} // closed once the files hold the Secret's pair
	syncedOnce sync.Once
}

func newServingFiles(kube kubernetes.Interface, secret types.NamespacedName, dir string) *servingFiles {
	return &servingFiles{kube: kube, secret: secret, dir: dir, synced: make(chan struct{})}
}

// Start watches the one Secret until ctx ends.
func (f *servingFiles) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("webhook").WithValues("secret", f.secret, "dir", f.dir)
	// The periodic resync retries a write that failed and restores files
	// removed from under the server.
	factory := informers.NewSharedInformerFactoryWithOptions(f.kube, time.Minute,
		informers.WithNamespace(f.secret.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", f.secret.Name).String()
		}))
	onChange := func(obj any) {
		secret, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		written, err := writeServingFiles(f.dir, secret.Data)
		switch {
		case errors.Is(err, errNotIssued):
			log.Info("Waiting for the certificate rotator to issue the serving certificate")
			return
		case err != nil:
			log.Error(err, "Cannot write the serving certificate")
			return
		case written:
			log.Info("Wrote the serving certificate")
		}
		observeCertExpiry(secret.Data[certKey])
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(secret.Data[caCertKey])
		f.mu.Lock()
		f.roots = roots
		f.mu.Unlock()
		f.syncedOnce.Do(func() { close(f.synced) })
	}
	if _, err := factory.Core().V1().Secrets().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    onChange,
		UpdateFunc: func(_, obj any) { onChange(obj) },
	}); err != nil {
		return fmt.Errorf("watching Secret %s: %w", f.secret, err)
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

// NeedLeaderElection is false: every replica serves the webhook.
func (f *servingFiles) NeedLeaderElection() bool { return false }

// Roots is the CA of the pair on disk, nil until there is one.
func (f *servingFiles) Roots() *x509.CertPool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.roots
}

// writeServingFiles writes the CA and the serving pair of a rotator's Secret
// into dir, each file replaced whole, and reports whether it changed any. A
// pair that does not match or a CA that does not parse is not written: the
// server would keep serving the files already there, but could not start
// without any.
func writeServingFiles(dir string, data map[string][]byte) (bool, error) {
	if len(data[certKey]) == 0 || len(data[keyKey]) == 0 || len(data[caCertKey]) == 0 {
		return false, errNotIssued
	}
	if _, err := tls.X509KeyPair(data[certKey], data[keyKey]); err != nil {
		return false, fmt.Errorf("the Secret's serving pair is not usable: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data[caCertKey]) {
		return false, fmt.Errorf("the Secret's %s holds no PEM certificate", caCertKey)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("creating %s: %w", dir, err)
	}
	written := false
	// The key first: the watcher reloads on either file and keeps the old
	// pair while the two do not match.
	for _, name := range []string{caCertKey, keyKey, certKey} {
		path := filepath.Join(dir, name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data[name]) {
			continue
		}
		if err := replaceFile(path, data[name]); err != nil {
			return written, err
		}
		written = true
	}
	return written, nil
}

// replaceFile writes data beside path and renames it over path, so a reader
// never sees half a file.
func replaceFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	return nil
}
