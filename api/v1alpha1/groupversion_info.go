// Package v1alpha1 holds Flotilla's API: the invitations between clusters
// (Target and ClusterTarget in a source, Source and ClusterSource in a
// target) and ClusterSummary, what a target publishes to its sources.
//
// +kubebuilder:object:generate=true
// +groupName=multicluster.flotilla.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is multicluster.flotilla.dev/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "multicluster.flotilla.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
