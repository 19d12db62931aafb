package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/flotilla-dev/flotilla/pkg/local"
	"github.com/flotilla-dev/flotilla/pkg/split"
)

// Options says where the webhook's certificate lives and how the API server
// reaches the webhook.
type Options struct {
	// Secret holds the CA and the serving pair that every replica serves.
	// It is created empty when missing; the leader's rotator fills and
	// renews it.
	Secret types.NamespacedName
	// CertDir is where each replica writes the pair; the manager's webhook
	// server must read its certificate from there.
	CertDir string
	// DNSNames of the serving certificate; the first is the name the
	// readiness check verifies.
	DNSNames []string
	// Host and Port the manager's webhook server listens on.
	Host string
	Port int
	// Registration, when set, is the MutatingWebhookConfiguration every
	// replica keeps and the rotator injects the CA into.
	Registration *Registration
	// InjectInto, when Registration is nil, names a
	// MutatingWebhookConfiguration someone else keeps (the Helm chart): the
	// rotator only injects the CA into it.
	InjectInto string
	// NotReadyTolerationSeconds is the source pods' toleration of a NotReady
	// virtual node (see Mutator); nil: forever.
	NotReadyTolerationSeconds *int64
	// KeepManagedFields keeps source pods' managedFields (see Mutator).
	KeepManagedFields bool
	// Split places the pods of on-demand/spot split workloads (see
	// Mutator); nil: no split.
	Split *split.Assigner
	// Local keeps opted-in pods in this cluster when a self target with
	// localFirst has room for them (see package local); nil: never.
	Local *local.Keeper
}

// The rotator's cache lists and watches every Secret of the agent's
// namespace (flotilla-system stands for it: the Role belongs in whichever
// namespace the agent runs in) and the MutatingWebhookConfigurations;
// create is for a Secret not made beforehand.
// +kubebuilder:rbac:groups="",namespace=flotilla-system,resources=secrets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch;create;update;patch

// Setup serves the pod mutator on every replica of mgr with the one
// certificate of opts.Secret, rotates that certificate on the leader, keeps
// the registration, and makes /readyz pass only once this replica serves
// the certificate. It creates the Secret if missing, so it calls the API
// server before mgr starts.
//
// The manager's webhook server is started by Setup once the certificate is
// on disk, as it cannot start without one: nothing else may call
// mgr.GetWebhookServer before.
func Setup(mgr manager.Manager, kube kubernetes.Interface, opts Options) error {
	if err := validDNSNames(opts.DNSNames); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ensureSecret(ctx, kube, opts.Secret); err != nil {
		return err
	}

	rotated := make(chan struct{})
	var webhooks []rotator.WebhookInfo
	if opts.Registration != nil {
		webhooks = append(webhooks, rotator.WebhookInfo{Name: opts.Registration.Name, Type: rotator.Mutating})
	} else if opts.InjectInto != "" {
		webhooks = append(webhooks, rotator.WebhookInfo{Name: opts.InjectInto, Type: rotator.Mutating})
	}
	// One replica rotates and injects at a time: cert-controller's
	// RequireLeaderElection runs the rotator, its cache and its injecting
	// controller on the leader only. Its ready channel then never closes on
	// a standby (open-policy-agent/cert-controller#53), which is why every
	// replica copies the Secret to its files itself and readiness is
	// decided by what the replica serves.
	if err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:             opts.Secret,
		CertDir:               opts.CertDir,
		CAName:                "flotilla-agent-webhook-ca",
		CAOrganization:        "flotilla",
		DNSName:               opts.DNSNames[0],
		ExtraDNSNames:         opts.DNSNames[1:],
		IsReady:               rotated,
		Webhooks:              webhooks,
		FieldOwner:            "flotilla-agent",
		RequireLeaderElection: true,
	}); err != nil {
		return fmt.Errorf("setting up the webhook certificate rotator: %w", err)
	}

	files := newServingFiles(kube, opts.Secret, opts.CertDir)
	if err := mgr.Add(files); err != nil {
		return err
	}
	var serving atomic.Bool
	if err := mgr.Add(everyReplica(func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case <-files.synced:
		}
		mgr.GetWebhookServer().Register(Path, &admission.Webhook{
			Handler: counted(&Mutator{Decoder: admission.NewDecoder(mgr.GetScheme()), NotReadyTolerationSeconds: opts.NotReadyTolerationSeconds, KeepManagedFields: opts.KeepManagedFields, Split: opts.Split, Local: opts.Local}),
		})
		serving.Store(true)
		return nil
	})); err != nil {
		return err
	}

	if reg := opts.Registration; reg != nil {
		if err := mgr.Add(everyReplica(func(ctx context.Context) error {
			if err := reg.Apply(ctx, kube); err != nil {
				return err
			}
			ctrl.Log.WithName("webhook").Info("Registered webhook", "configuration", reg.Name, "url", reg.URL, "service", reg.ServiceName)
			return nil
		})); err != nil {
			return err
		}
	}

	addr := net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))
	return mgr.AddReadyzCheck("webhook-certificate", func(_ *http.Request) error {
		if !serving.Load() {
			return fmt.Errorf("waiting for the serving certificate in Secret %s", opts.Secret)
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr,
			&tls.Config{RootCAs: files.Roots(), ServerName: opts.DNSNames[0]})
		if err != nil {
			return fmt.Errorf("the webhook at %s does not serve the certificate of Secret %s: %w", addr, opts.Secret, err)
		}
		conn.Close()
		select {
		case <-mgr.Elected():
			select {
			case <-rotated:
			default:
				return errors.New("the certificate rotator has not injected the CA into the webhook configuration yet")
			}
		default:
		}
		return nil
	})
}

// validDNSNames refuses what cert-controller cannot issue: it puts every
// name of the serving certificate in its DNS names, so an IP address would
// never match, and a rotator checking its own certificate against one would
// renew it on every check.
func validDNSNames(names []string) error {
	if len(names) == 0 {
		return errors.New("the webhook's serving certificate needs at least one DNS name")
	}
	for _, n := range names {
		if net.ParseIP(n) != nil {
			return fmt.Errorf("%q is an IP address: the webhook's serving certificate holds DNS names only; reach the webhook by a name (localhost, or <service>.<namespace>.svc)", n)
		}
	}
	return nil
}

// ensureSecret creates the rotator's Secret empty when it is missing: the
// rotator only updates it. Where the Secret is made beforehand, the agent
// needs no right to create Secrets.
func ensureSecret(ctx context.Context, kube kubernetes.Interface, key types.NamespacedName) error {
	api := kube.CoreV1().Secrets(key.Namespace)
	_, err := api.Get(ctx, key.Name, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading the webhook certificate Secret %s: %w", key, err)
	}
	_, err = api.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{"app.kubernetes.io/name": "flotilla"}},
		Type:       corev1.SecretTypeOpaque,
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the webhook certificate Secret %s: %w", key, err)
	}
	return nil
}

// everyReplica is a runnable that runs whether or not this replica leads.
type everyReplica func(ctx context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (f everyReplica) NeedLeaderElection() bool        { return false }
