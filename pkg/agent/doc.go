// Package agent sets up Flotilla's per-cluster agent from its
// configuration (api/config/v1alpha1): NewManager makes the
// controller-runtime manager, with the cache shape the agent needs, and
// Setup adds the webhook, the controllers and the virtual nodes to it.
// cmd/agent reads the configuration file and wires these two; tests start
// the agent in-process the same way.
package agent
