// Package v1alpha1 holds Flotilla's API: the invitations between clusters
// (Target and ClusterTarget in a source, Source and ClusterSource in a
// target) and ClusterSummary, what a target publishes to its sources.
//
// +kubebuilder:object:generate=true
// +groupName=multicluster.flotilla.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is multicluster.flotilla.dev/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "multicluster.flotilla.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package (each file's
	// init adds its own, register).
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// register adds objs, kinds of GroupVersion, to what SchemeBuilder
// registers.
func register(objs ...runtime.Object) {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, objs...)
		return nil
	})
}
