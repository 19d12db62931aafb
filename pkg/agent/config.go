package agent

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/flotilla-dev/flotilla/api/config/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/vnode"
)

// Config is the agent's configuration, defaulted and valid.
type Config = configv1alpha1.AgentConfiguration

var configCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	utilruntime.Must(configv1alpha1.AddToScheme(s))
	return serializer.NewCodecFactory(s, serializer.EnableStrict)
}()

// LoadFile reads the configuration file at path (Load).
func LoadFile(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the agent's configuration: %w", err)
	}
	c, err := Load(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Load decodes a configuration (YAML or JSON) strictly: its apiVersion and
// kind must be config.flotilla.dev/v1alpha1 AgentConfiguration, and an
// unknown or repeated field is an error that names it. Fields left out take
// their defaults. It does not validate: a caller applies its overrides,
// then Validate.
func Load(data []byte) (*Config, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return nil, err
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return nil, fmt.Errorf("apiVersion and kind are required: %s, kind AgentConfiguration", configv1alpha1.GroupVersion)
	}
	c := &Config{}
	obj, gvk, err := configCodecs.UniversalDecoder().Decode(data, nil, c)
	if err != nil {
		return nil, err
	}
	if obj != c {
		return nil, fmt.Errorf("%s is not an AgentConfiguration", gvk)
	}
	return c, nil
}

// Default returns a configuration of clusterName with every other field at
// its default.
func Default(clusterName string) *Config {
	c := &Config{ClusterName: clusterName}
	configv1alpha1.SetDefaults(c)
	return c
}

// Validate checks a defaulted configuration; each error names its field.
func Validate(c *Config) error {
	return validate(c).ToAggregate()
}

func validate(c *Config) field.ErrorList {
	var errs field.ErrorList
	if c.ClusterName == "" {
		errs = append(errs, field.Required(field.NewPath("clusterName"), "this cluster's name as its targets know it: it labels every candidate it sends"))
	}
	if err := protocol.ValidateTopologyKeys(c.TopologyKeys); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("topologyKeys"), c.TopologyKeys, err.Error()))
	}

	p := field.NewPath("placement")
	errs = append(errs, positive(p.Child("workers"), *c.Placement.Workers)...)
	errs = append(errs, notNegative(p.Child("maxCandidates"), int64(*c.Placement.MaxCandidates), "0 means every target")...)
	errs = append(errs, notNegativeDuration(p.Child("electionTimeout"), c.Placement.ElectionTimeout.Duration)...)
	errs = append(errs, notNegativeDuration(p.Child("denyAfter"), c.Placement.DenyAfter.Duration)...)
	errs = append(errs, notNegativeDuration(p.Child("localOverflowAfter"), c.Placement.LocalOverflowAfter.Duration)...)

	v := field.NewPath("virtualNodes")
	errs = append(errs, positive(v.Child("workers"), *c.VirtualNodes.Workers)...)
	if d := c.VirtualNodes.NotReadyAfter.Duration; d <= 0 {
		errs = append(errs, field.Invalid(v.Child("notReadyAfter"), d.String(), "must be a positive duration"))
	}
	if s := *c.VirtualNodes.NotReadyTolerationSeconds; s < -1 {
		errs = append(errs, field.Invalid(v.Child("notReadyTolerationSeconds"), s, "must be seconds, or -1 for never"))
	}
	k := v.Child("kubelet")
	if port := *c.VirtualNodes.Kubelet.Port; port < 0 || port > 65535 {
		errs = append(errs, field.Invalid(k.Child("port"), port, "must be a port, or 0 to turn the kubelet API off"))
	}
	if a := c.VirtualNodes.Kubelet.Address; a != "" && net.ParseIP(a) == nil {
		errs = append(errs, field.Invalid(k.Child("address"), a, "must be an IP address (a node's InternalIP)"))
	}
	if (c.VirtualNodes.Kubelet.CertFile == "") != (c.VirtualNodes.Kubelet.KeyFile == "") {
		errs = append(errs, field.Invalid(k.Child("keyFile"), c.VirtualNodes.Kubelet.KeyFile, "certFile and keyFile go together"))
	}

	t := field.NewPath("targets")
	if r := *c.Targets.TokenRenewAfter; r <= 0 || r >= 1 {
		errs = append(errs, field.Invalid(t.Child("tokenRenewAfter"), r, "must be a share of the token's lifetime, between 0 and 1"))
	}
	if _, err := TenantNetworks(c); err != nil {
		errs = append(errs, field.Invalid(t.Child("tenantPodCIDRs"), c.Targets.TenantPodCIDRs, err.Error()))
	}

	i := field.NewPath("invitations")
	if ttl := c.Invitations.TokenTTL.Duration; ttl < 10*time.Minute {
		errs = append(errs, field.Invalid(i.Child("tokenTTL"), ttl.String(), "the API server issues tokens of 10m or more"))
	}
	if d := c.Invitations.SummaryInterval.Duration; d <= 0 {
		errs = append(errs, field.Invalid(i.Child("summaryInterval"), d.String(), "must be a positive duration"))
	}

	w := field.NewPath("webhook")
	if port := *c.Webhook.Port; port <= 0 || port > 65535 {
		errs = append(errs, field.Invalid(w.Child("port"), port, "must be a port"))
	}
	for n, h := range c.Webhook.Hosts {
		if net.ParseIP(h) != nil {
			errs = append(errs, field.Invalid(w.Child("hosts").Index(n), h, "must be a DNS name: the serving certificate holds no IP addresses"))
		}
	}

	cc := field.NewPath("clientConnection")
	if q := *c.ClientConnection.QPS; q <= 0 {
		errs = append(errs, field.Invalid(cc.Child("qps"), q, "must be positive"))
	}
	errs = append(errs, positive(cc.Child("burst"), *c.ClientConnection.Burst)...)

	l := c.LeaderElection
	lp := field.NewPath("leaderElection")
	if *l.LeaderElect {
		if l.ResourceName == "" {
			errs = append(errs, field.Required(lp.Child("resourceName"), "the Lease's name, when leaderElect is true"))
		}
		if !(l.RetryPeriod.Duration < l.RenewDeadline.Duration && l.RenewDeadline.Duration < l.LeaseDuration.Duration) {
			errs = append(errs, field.Invalid(lp.Child("renewDeadline"), l.RenewDeadline.Duration.String(),
				fmt.Sprintf("must lie between retryPeriod (%s) and leaseDuration (%s)", l.RetryPeriod.Duration, l.LeaseDuration.Duration)))
		}
	}
	return errs
}

// TenantNetworks parses targets.tenantPodCIDRs.
func TenantNetworks(c *Config) ([]netip.Prefix, error) {
	if len(c.Targets.TenantPodCIDRs) == 0 {
		return nil, nil
	}
	return vnode.ParsePodCIDRs(c.Targets.TenantPodCIDRs)
}

func positive(p *field.Path, n int32) field.ErrorList {
	if n <= 0 {
		return field.ErrorList{field.Invalid(p, n, "must be positive")}
	}
	return nil
}

func notNegative(p *field.Path, n int64, zero string) field.ErrorList {
	if n < 0 {
		return field.ErrorList{field.Invalid(p, n, "must not be negative; "+zero)}
	}
	return nil
}

func notNegativeDuration(p *field.Path, d time.Duration) field.ErrorList {
	if d < 0 {
		return field.ErrorList{field.Invalid(p, d.String(), "must not be negative; 0 means never")}
	}
	return nil
}
