package memtrim

import (
	"context"
	"time"

	"k8s.io/klog/v2"
)

// Periodic is a manager.Runnable that trims the executable's pages (Trim)
// First after it starts, once the process is running (its initializers
// done, its caches filled), then every Interval (0: once), so that pages a
// burst of work brought back and no longer uses go again. It needs no
// leader.
type Periodic struct {
	First, Interval time.Duration
}

// NeedLeaderElection: every replica trims its own pages.
func (p Periodic) NeedLeaderElection() bool { return false }

// Start trims until ctx ends.
func (p Periodic) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("memtrim")
	wait := p.First
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		before, after, err := Trim()
		if err != nil {
			// Nothing is lost: the pages stay as they were.
			log.Error(err, "Releasing the executable's unused pages")
		} else {
			log.V(2).Info("Released the executable's unused pages", "residentFromFilesBeforeMiB", before>>20, "afterMiB", after>>20)
		}
		if p.Interval <= 0 {
			return nil
		}
		wait = p.Interval
	}
}
