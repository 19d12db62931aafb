package placementpolicy

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placement"
)

// Compiled is a policy in the terms of pkg/placement.
type Compiled struct {
	// Name is the policy's name, for the messages that cite it.
	Name        string
	Selector    placement.Selector
	Constraints []placement.Constraint
	// Weight multiplies the spread score.
	Weight int64
	// Window, when set, lets an election wait up to Timeout for Candidates
	// reservations.
	Window *Window
}

// Window is the scoring window of a policy.
type Window struct {
	Candidates int
	Timeout    time.Duration
}

// Keys are the topology keys of the spread constraints, in order.
func (c *Compiled) Keys() []string {
	keys := make([]string, len(c.Constraints))
	for i, s := range c.Constraints {
		keys[i] = s.TopologyKey
	}
	return keys
}

// Spreads reports whether the policy spreads pods at all.
func (c *Compiled) Spreads() bool { return c != nil && len(c.Constraints) > 0 }

// Compile turns a policy's spec into placement's terms. Its only errors
// are selectors the API server's validation cannot see are wrong (an
// operator's values that do not parse); the policy's status reports them.
func Compile(p *v1alpha1.PlacementPolicy) (*Compiled, error) {
	c := &Compiled{Name: p.Name, Weight: 1}
	var err error
	if c.Selector.Cluster, err = selector(p.Spec.ClusterSelector, "spec.clusterSelector"); err != nil {
		return nil, err
	}
	if a := p.Spec.ClusterAffinity; a != nil {
		for i := range a.Required {
			s, err := selector(&a.Required[i], fmt.Sprintf("spec.clusterAffinity.required[%d]", i))
			if err != nil {
				return nil, err
			}
			c.Selector.Required = append(c.Selector.Required, s)
		}
		for i := range a.Preferred {
			s, err := selector(&a.Preferred[i].Selector, fmt.Sprintf("spec.clusterAffinity.preferred[%d].selector", i))
			if err != nil {
				return nil, err
			}
			c.Selector.Preferred = append(c.Selector.Preferred, placement.Preference{Weight: int64(a.Preferred[i].Weight), Selector: s})
		}
		for i := range a.FallbackGroups {
			s, err := selector(&a.FallbackGroups[i], fmt.Sprintf("spec.clusterAffinity.fallbackGroups[%d]", i))
			if err != nil {
				return nil, err
			}
			c.Selector.Groups = append(c.Selector.Groups, s)
		}
	}
	for _, s := range p.Spec.SpreadConstraints {
		when := s.WhenUnsatisfiable
		if when == "" {
			when = placement.ScheduleAnyway
		}
		c.Constraints = append(c.Constraints, placement.Constraint{TopologyKey: s.TopologyKey, MaxSkew: int(max(s.MaxSkew, 1)), WhenUnsatisfiable: when})
	}
	if sc := p.Spec.Scoring; sc != nil {
		if sc.SpreadWeight != nil {
			c.Weight = int64(*sc.SpreadWeight)
		}
		if w := sc.Window; w != nil && w.Candidates > 0 && w.TimeoutMilliseconds > 0 {
			c.Window = &Window{Candidates: int(w.Candidates), Timeout: time.Duration(w.TimeoutMilliseconds) * time.Millisecond}
		}
	}
	return c, nil
}

// selector parses a label selector; nil selects everything.
func selector(s *metav1.LabelSelector, field string) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return sel, nil
}
