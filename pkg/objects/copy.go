package objects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/flotilla-dev/flotilla/pkg/candidate"
	"github.com/flotilla-dev/flotilla/pkg/protocol"
	"github.com/flotilla-dev/flotilla/pkg/target"
)

// callTimeout bounds every call to a target or to the source, as the
// targets' own calls are bounded: a hung target costs one timeout.
const callTimeout = 10 * time.Second

// ownedTTL is how long an ownerReference this process wrote on a copy is
// remembered, so that a pod reconciled again does not write it again. The
// patch is idempotent: forgetting costs one write.
const ownedTTL = 30 * time.Minute

// A self target whose namespace mapping sends a pod elsewhere in the
// source cluster gets copies there, written with the agent's own identity.
// +kubebuilder:rbac:groups="",resources=configmaps;secrets,verbs=create;patch

// Copier writes copies of the source cluster's ConfigMaps and Secrets into
// targets, each under its copy's name (protocol.CopyName: the prefix the
// target's admission policy lets this source's candidates reference, and
// the object's name), which the candidates name instead of the object's
// (candidate.Build). It never reads a target's ConfigMaps or Secrets (an invited
// identity may not): it creates a copy, or patches one that exists with a
// JSON patch whose first operation tests that the copy is labelled as this
// source's, so an object someone else made is never overwritten (the
// target's admission policy refuses the same).
//
// Each copy is owned by the candidates in its target that use it (an
// ownerReference each, merged by UID with a strategic-merge patch, so no
// read is needed): the target's garbage collector deletes the copy with
// its last user.
type Copier struct {
	// SourceCluster labels every copy.
	SourceCluster string
	// Source reads an object's data in the source cluster; the Watcher
	// holds only names.
	Source  kubernetes.Interface
	Watcher *Watcher

	owned *cache.Expiring
}

// NewCopier returns a Copier.
func NewCopier(sourceCluster string, source kubernetes.Interface, w *Watcher) *Copier {
	return &Copier{SourceCluster: sourceCluster, Source: source, Watcher: w, owned: cache.NewExpiring()}
}

// MissingError says which objects a pod needs that the source does not
// hold: no target gets a candidate of the pod until they exist.
type MissingError struct {
	Namespace string
	Refs      []Ref
}

func (e *MissingError) Error() string {
	names := make([]string, len(e.Refs))
	for i, r := range e.Refs {
		names[i] = fmt.Sprintf("%s %s/%s", r.Kind, e.Namespace, r.Name)
	}
	return "the pod references " + strings.Join(names, ", ") + ", which this cluster does not hold"
}

// RefusedError says that a target would not take the copy of an object,
// most often because an object of that name that this source did not copy
// is in the way there.
type RefusedError struct {
	Target    string
	Kind      Kind
	Namespace string
	// Name is the copy's name in the target; Original the object's in
	// the source.
	Name, Original string
	// InTheWay: the object exists in the target and is not this source's
	// copy.
	InTheWay bool
	Err      error
}

func (e *RefusedError) Error() string {
	if e.InTheWay {
		return fmt.Sprintf("target %s already holds a %s %s/%s that is not this cluster's copy of %s; it is left alone, and no candidate goes there until it is removed: %v",
			e.Target, e.Kind, e.Namespace, e.Name, e.Original, e.Err)
	}
	return fmt.Sprintf("target %s refused %s %s/%s, the copy of %s: %v", e.Target, e.Kind, e.Namespace, e.Name, e.Original, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// original is a source object's content as its copies carry it.
type original struct {
	Kind       Kind
	Name       string
	Type       corev1.SecretType
	Data       map[string]string
	BinaryData map[string][]byte
	SecretData map[string][]byte
}

// fetch reads an object's data in the source; nil when it does not exist.
func (c *Copier) fetch(ctx context.Context, kind Kind, namespace, name string) (*original, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var o *original
	var err error
	switch kind {
	case ConfigMap:
		var cm *corev1.ConfigMap
		if cm, err = c.Source.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
			o = &original{Kind: kind, Name: name, Data: cm.Data, BinaryData: cm.BinaryData}
		}
	case Secret:
		var s *corev1.Secret
		if s, err = c.Source.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{}); err == nil {
			o = &original{Kind: kind, Name: name, Type: s.Type, SecretData: s.Data}
		}
	default:
		return nil, fmt.Errorf("unknown kind %q", kind)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", kind, namespace, name, err)
	}
	return o, nil
}

// copyName is the name of the copy of the source's object name in every
// target.
func (c *Copier) copyName(name string) string { return protocol.CopyName(c.SourceCluster, name) }

func (c *Copier) meta(o *original, namespace string, owners []*corev1.Pod) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name: c.copyName(o.Name), Namespace: namespace,
		Labels: map[string]string{protocol.CopyLabel: "true", protocol.SourceClusterLabel: c.SourceCluster},
	}
	for _, p := range owners {
		m.OwnerReferences = append(m.OwnerReferences, ownerRef(p))
	}
	return m
}

// ownerRef points at a candidate, without blockOwnerDeletion: deleting a
// candidate never waits for its copies.
func ownerRef(p *corev1.Pod) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}
}

// create creates the copy of o in namespace of t, owned by owners.
func (c *Copier) create(ctx context.Context, t *target.Target, namespace string, o *original, owners []*corev1.Pod) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var err error
	switch o.Kind {
	case ConfigMap:
		_, err = t.Client().CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: c.meta(o, namespace, owners), Data: o.Data, BinaryData: o.BinaryData,
		}, metav1.CreateOptions{})
	case Secret:
		typ := copyType(o.Type)
		_, err = t.Client().CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: c.meta(o, namespace, owners), Type: typ, Data: o.SecretData,
		}, metav1.CreateOptions{})
	}
	if err == nil {
		c.remember(t, namespace, o.Kind, o.Name, owners)
		klog.V(2).InfoS("Copied object into target", "target", t.Name, "kind", o.Kind, "object", o.Name, "copy", klog.KRef(namespace, c.copyName(o.Name)))
	}
	return err
}

// patch applies a patch to the object kind/name (a copy's name) in
// namespace of t.
func patch(ctx context.Context, t *target.Target, kind Kind, namespace, name string, pt types.PatchType, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var err error
	switch kind {
	case ConfigMap:
		_, err = t.Client().CoreV1().ConfigMaps(namespace).Patch(ctx, name, pt, data, metav1.PatchOptions{})
	case Secret:
		_, err = t.Client().CoreV1().Secrets(namespace).Patch(ctx, name, pt, data, metav1.PatchOptions{})
	}
	return err
}

// ownTest is the JSON-patch operation that fails unless the object is
// this source's copy.
func (c *Copier) ownTest() map[string]any {
	return map[string]any{
		"op":    "test",
		"path":  "/metadata/labels/" + strings.ReplaceAll(strings.ReplaceAll(protocol.SourceClusterLabel, "~", "~0"), "/", "~1"),
		"value": c.SourceCluster,
	}
}

// patchData replaces the copy's data with o's, if the copy is this
// source's; the ownerReferences other patches added stay.
func (c *Copier) patchData(ctx context.Context, t *target.Target, namespace string, o *original) error {
	ops := []map[string]any{c.ownTest()}
	switch o.Kind {
	case ConfigMap:
		ops = append(ops,
			map[string]any{"op": "add", "path": "/data", "value": o.Data},
			map[string]any{"op": "add", "path": "/binaryData", "value": o.BinaryData})
	case Secret:
		ops = append(ops, map[string]any{"op": "add", "path": "/data", "value": o.SecretData})
	}
	body, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	return c.classify(t, namespace, o.Kind, o.Name, patch(ctx, t, o.Kind, namespace, c.copyName(o.Name), types.JSONPatchType, body))
}

// patchOwners adds owners to the ownerReferences of the copy of the
// source's object name (merged by UID).
// A self target has no admission policy that keeps the agent off what
// others made: there a test of the label comes first.
func (c *Copier) patchOwners(ctx context.Context, t *target.Target, namespace string, kind Kind, name string, owners []*corev1.Pod) error {
	if c.remembered(t, namespace, kind, name, owners) {
		return nil
	}
	if t.Self {
		body, err := json.Marshal([]map[string]any{c.ownTest()})
		if err != nil {
			return err
		}
		if err := c.classify(t, namespace, kind, name, patch(ctx, t, kind, namespace, c.copyName(name), types.JSONPatchType, body)); err != nil {
			return err
		}
	}
	refs := make([]metav1.OwnerReference, len(owners))
	for i, p := range owners {
		refs[i] = ownerRef(p)
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": refs}})
	if err != nil {
		return err
	}
	if err := c.classify(t, namespace, kind, name, patch(ctx, t, kind, namespace, c.copyName(name), types.StrategicMergePatchType, body)); err != nil {
		return err
	}
	c.remember(t, namespace, kind, name, owners)
	return nil
}

// classify turns a refusal of a write to the existing copy of the
// source's object name into a RefusedError: a failed test of the label and
// the admission policy's denial are both an Invalid (422), RBAC a
// Forbidden.
func (c *Copier) classify(t *target.Target, namespace string, kind Kind, name string, err error) error {
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return err
	case apierrors.IsInvalid(err):
		return &RefusedError{Target: t.Name, Kind: kind, Namespace: namespace, Name: c.copyName(name), Original: name, InTheWay: true, Err: err}
	case apierrors.IsForbidden(err):
		return &RefusedError{Target: t.Name, Kind: kind, Namespace: namespace, Name: c.copyName(name), Original: name, Err: err}
	}
	return fmt.Errorf("target %s: writing the copy %s of %s %s/%s: %w", t.Name, c.copyName(name), kind, namespace, name, err)
}

func ownedKey(t *target.Target, namespace string, kind Kind, name string, owner types.UID) string {
	return t.Name + "\x00" + namespace + "\x00" + string(kind) + "\x00" + name + "\x00" + string(owner)
}

func (c *Copier) remembered(t *target.Target, namespace string, kind Kind, name string, owners []*corev1.Pod) bool {
	for _, p := range owners {
		if _, ok := c.owned.Get(ownedKey(t, namespace, kind, name, p.UID)); !ok {
			return false
		}
	}
	return true
}

func (c *Copier) remember(t *target.Target, namespace string, kind Kind, name string, owners []*corev1.Pod) {
	for _, p := range owners {
		c.owned.Set(ownedKey(t, namespace, kind, name, p.UID), struct{}{}, ownedTTL)
	}
}

// sameNamespace reports whether the pod's candidates in t live beside the
// objects themselves: a self target that does not map the namespace needs
// no copies, and its candidates name the objects themselves.
func sameNamespace(t *target.Target, sourceNamespace string) bool {
	return !candidate.NeedsCopies(t.Self, sourceNamespace, t.NamespaceFor(sourceNamespace))
}

// Needs is what one source pod needs copied into the targets that get its
// candidate: a candidate.Preparer for one reconcile of the pod. Each
// object's data is read at most once, and only if a target needs a copy.
type Needs struct {
	c         *Copier
	namespace string
	refs      []Ref
	missing   []Ref

	mu      sync.Mutex
	fetched map[Ref]*original
}

var _ candidate.Preparer = (*Needs)(nil)

// For returns what the source pod needs copied, nil when it references no
// ConfigMap or Secret.
func (c *Copier) For(pod *corev1.Pod) (*Needs, error) {
	refs, err := refsOf(pod)
	if err != nil || len(refs) == 0 {
		return nil, err
	}
	n := &Needs{c: c, namespace: pod.Namespace, refs: refs, fetched: map[Ref]*original{}}
	for _, r := range refs {
		if exists, known := c.Watcher.Exists(r.Kind, pod.Namespace, r.Name); known && !exists && !r.Optional {
			n.missing = append(n.missing, r)
		}
	}
	return n, nil
}

// Missing is the objects the pod needs that the source does not hold.
func (n *Needs) Missing() *MissingError {
	if len(n.missing) == 0 {
		return nil
	}
	return &MissingError{Namespace: n.namespace, Refs: n.missing}
}

// originals reads the objects to copy: those the source holds.
func (n *Needs) originals(ctx context.Context) ([]*original, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*original
	var missing []Ref
	for _, r := range n.refs {
		o, done := n.fetched[r]
		if !done {
			var err error
			if o, err = n.c.fetch(ctx, r.Kind, n.namespace, r.Name); err != nil {
				return nil, err
			}
			n.fetched[r] = o
		}
		switch {
		case o != nil:
			out = append(out, o)
		case !r.Optional:
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		return nil, &MissingError{Namespace: n.namespace, Refs: missing}
	}
	return out, nil
}

// Prepare copies every object the pod references and the source holds into
// the pod's namespace in t, before its candidate goes there.
func (n *Needs) Prepare(ctx context.Context, t *target.Target) error {
	if err := n.Missing(); err != nil {
		return err
	}
	if sameNamespace(t, n.namespace) {
		return nil
	}
	ns := t.NamespaceFor(n.namespace)
	if !t.Covers(ns) {
		return fmt.Errorf("target %s does not invite this cluster into namespace %s", t.Name, ns)
	}
	originals, err := n.originals(ctx)
	if err != nil {
		return err
	}
	for _, o := range originals {
		err := n.c.create(ctx, t, ns, o, nil)
		if apierrors.IsAlreadyExists(err) {
			err = n.c.patchData(ctx, t, ns, o)
		} else {
			err = n.c.createError(t, ns, o, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Adopt makes the candidate an owner of each copy it uses in t, so the
// copies go with their last user. A copy that is gone (its earlier users
// went before this one was made its owner) is made again.
func (n *Needs) Adopt(ctx context.Context, t *target.Target, cand *corev1.Pod) error {
	if sameNamespace(t, n.namespace) {
		return nil
	}
	ns := t.NamespaceFor(n.namespace)
	owners := []*corev1.Pod{cand}
	var errs []error
	for _, r := range n.refs {
		err := n.c.patchOwners(ctx, t, ns, r.Kind, r.Name, owners)
		if !apierrors.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		o, err := n.fetchOne(ctx, r)
		if err != nil || o == nil {
			// Not in the source: nothing to copy (a missing required
			// object keeps new candidates away, see Prepare).
			errs = append(errs, err)
			continue
		}
		err = n.c.create(ctx, t, ns, o, owners)
		if apierrors.IsAlreadyExists(err) {
			err = n.c.patchOwners(ctx, t, ns, r.Kind, r.Name, owners)
		} else {
			err = n.c.createError(t, ns, o, err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (n *Needs) fetchOne(ctx context.Context, r Ref) (*original, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if o, done := n.fetched[r]; done {
		return o, nil
	}
	o, err := n.c.fetch(ctx, r.Kind, n.namespace, r.Name)
	if err == nil {
		n.fetched[r] = o
	}
	return o, err
}

// createError explains a create of a copy that failed.
func (c *Copier) createError(t *target.Target, namespace string, o *original, err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err):
		return &RefusedError{Target: t.Name, Kind: o.Kind, Namespace: namespace, Name: c.copyName(o.Name), Original: o.Name, Err: err}
	}
	return fmt.Errorf("target %s: copying %s %s/%s to %s: %w", t.Name, o.Kind, namespace, o.Name, c.copyName(o.Name), err)
}

// copyType is the type of a Secret's copy. A token Secret is a controller's
// of the target: its token controller would delete one of a ServiceAccount
// it does not have, and the invitation's policy refuses both token types.
// The data is what the pod reads, so such a copy is Opaque.
func copyType(typ corev1.SecretType) corev1.SecretType {
	if typ == corev1.SecretTypeServiceAccountToken || typ == corev1.SecretTypeBootstrapToken {
		return corev1.SecretTypeOpaque
	}
	return typ
}
