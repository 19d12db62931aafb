// Command kubectl-flotilla is Flotilla's kubectl plugin: invite a source in
// a target cluster, join a target in a source cluster, show the status of
// both sides, and explain where one pod runs. Put it on $PATH and run
// `kubectl flotilla --help`.
package main

import (
	"os"

	"github.com/flotilla-dev/flotilla/pkg/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
