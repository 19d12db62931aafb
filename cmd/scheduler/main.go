// Command scheduler is kube-scheduler with the Flotilla plugins compiled in.
//
// It takes every flag of kube-scheduler. Its KubeSchedulerConfiguration is
// expected to carry a profile named "flotilla" (the schedulerName of candidate
// pods) next to the default profile, so one scheduler serves the cluster's
// ordinary pods and the candidates that other clusters send it.
//
// The command is pkg/scheduler's; main adds only what kube-scheduler's main
// links in: the JSON log format and the client-go and version metrics.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	"github.com/flotilla-dev/flotilla/pkg/scheduler"
)

func main() {
	os.Exit(cli.Run(scheduler.NewCommand()))
}
