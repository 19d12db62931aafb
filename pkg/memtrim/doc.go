// Package memtrim lets go of the resident pages of the process's own
// executable that it does not use.
//
// A Go program's package initializers run code spread over its whole text,
// and the kernel maps the file's pages around each page touched, so that
// once started the agent holds most of its 105 MB binary resident (60 of
// its 84 MiB at rest, measured in docs/benchmarks.md) though it runs a
// small part of it. Those pages count in its RSS and in its container's
// working set. Trim unmaps the executable's read-only pages: the ones the
// process still uses come back from the page cache at their next use, the
// others are left for the kernel to reclaim.
package memtrim
