package candidate

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-multierror"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// Placement is the state of a source pod's candidate in one target after
// FanOut: the cached candidate (nil while the target's cache has not seen
// it), or the error that kept it from being created.
type Placement struct {
	Target    *target.Target
	Candidate *corev1.Pod
	Err       error
	// Created: this FanOut created the candidate.
	Created bool
	// AdoptErr is set when the target holds the candidate but the objects
	// it uses could not be tied to it yet; try again later.
	AdoptErr error
}

// Preparer gets a target ready for the candidate of one source pod. FanOut
// calls Prepare before it creates the candidate in a target, and creates
// none there when it fails; it calls Adopt for a candidate the target
// holds, after it was created.
type Preparer interface {
	Prepare(ctx context.Context, t *target.Target) error
	Adopt(ctx context.Context, t *target.Target, candidate *corev1.Pod) error
}

// Shaper adjusts the candidate built for one target before it is created
// (the placement policy pins the domain it counted it in).
type Shaper func(t *target.Target, candidate *corev1.Pod)

// FanOut makes sure every target has the source pod's candidate. Targets are
// called in parallel and each call is bounded, so an unreachable target only
// shows up as that target's error. prep, if not nil, prepares each target
// for the candidate; shape, if not nil, adjusts each new candidate.
func FanOut(ctx context.Context, source *corev1.Pod, sourceCluster string, targets []*target.Target, prep Preparer, shape Shaper) []Placement {
	out := make([]Placement, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		out[i].Target = t
		name := CandidateNameOf(source, sourceCluster, t.Name)
		if c, ok := t.Candidate(t.NamespaceFor(source.Namespace), name); ok && types.UID(c.Labels[protocol.SourceUIDLabel]) == source.UID {
			out[i].Candidate = c
			if prep != nil && c.DeletionTimestamp == nil {
				wg.Go(func() { out[i].AdoptErr = prep.Adopt(ctx, t, c) })
			}
			continue
		}
		if !t.HasSynced() {
			// Without a listed cache we cannot tell a missing candidate from
			// one we have not seen; creating is still safe (the name is
			// deterministic), but report the target as not ready.
			out[i].Err = errNotSynced(t)
		}
		wg.Go(func() {
			if prep != nil {
				if err := prep.Prepare(ctx, t); err != nil {
					out[i].Err = err
					return
				}
			}
			c, err := Build(source, sourceCluster, t.Name, t.NamespaceFor(source.Namespace), t.Self, t.KeepSourceLabels())
			if err == nil && shape != nil {
				shape(t, c)
			}
			if err == nil {
				out[i].Created, err = t.Create(ctx, c)
			}
			if err != nil {
				out[i].Err = err
			}
		})
	}
	wg.Wait()
	return out
}

// OtherUIDs reports whether any target holds a candidate of a source pod
// named namespace/name whose source UID is not uid.
func OtherUIDs(namespace, name string, uid types.UID, targets []*target.Target) bool {
	for _, t := range targets {
		for _, c := range t.CandidatesOf(namespace, name) {
			if types.UID(c.Labels[protocol.SourceUIDLabel]) != uid && c.DeletionTimestamp == nil {
				return true
			}
		}
	}
	return false
}

// CleanUp deletes the candidates of source pods named namespace/name in
// every target, but those keep says to keep (by target and source UID).
// Which ones may go is the caller's to know: a pod deleted and created
// again under the same name (a StatefulSet's, or `kubectl replace --force`)
// leaves the earlier pod's candidates behind, which must go, and those of
// the pod that lives must not.
func CleanUp(ctx context.Context, namespace, name string, targets []*target.Target, keep func(t *target.Target, sourceUID types.UID) bool) error {
	var mu sync.Mutex
	var errs *multierror.Error
	var wg sync.WaitGroup
	for _, t := range targets {
		for _, c := range t.CandidatesOf(namespace, name) {
			if keep(t, types.UID(c.Labels[protocol.SourceUIDLabel])) {
				continue
			}
			if c.DeletionTimestamp != nil {
				continue
			}
			wg.Go(func() {
				if err := t.Delete(ctx, c.Namespace, c.Name, c.UID); err != nil {
					mu.Lock()
					errs = multierror.Append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	return errs.ErrorOrNil()
}

func errNotSynced(t *target.Target) error {
	if err := t.Err(); err != nil {
		return fmt.Errorf("target not synced: %w", err)
	}
	return errors.New("target not synced yet")
}

// Of is the candidate of source in t, as t's cache holds it: false when t
// holds none, or holds a candidate of that name for another pod (an
// earlier pod of the same name).
func Of(t *target.Target, source *corev1.Pod, sourceCluster string) (*corev1.Pod, bool) {
	cand, ok := t.Candidate(t.NamespaceFor(source.Namespace), CandidateNameOf(source, sourceCluster, t.Name))
	if !ok || types.UID(cand.Labels[protocol.SourceUIDLabel]) != source.UID {
		return nil, false
	}
	return cand, true
}
