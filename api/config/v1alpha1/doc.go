// Package v1alpha1 is the agent's configuration file,
// config.flotilla.dev/v1alpha1 AgentConfiguration: what the chart renders
// once into a ConfigMap and the agent reads at start (--config). It is not
// served by any API server.
//
// Defaults are the agent's; pkg/agent loads a file strictly (an unknown
// field is an error that names it), defaults it and validates it.
//
// +kubebuilder:object:generate=true
// +kubebuilder:skip
// +groupName=config.flotilla.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is config.flotilla.dev/v1alpha1.
	GroupVersion = schema.GroupVersion{Group: "config.flotilla.dev", Version: "v1alpha1"}

	// SchemeBuilder registers AgentConfiguration and its defaults.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes, addDefaultingFuncs)

	// AddToScheme adds this package's types and defaults to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &AgentConfiguration{})
	return nil
}

func addDefaultingFuncs(s *runtime.Scheme) error {
	s.AddTypeDefaultingFunc(&AgentConfiguration{}, func(obj any) { SetDefaults(obj.(*AgentConfiguration)) })
	return nil
}
