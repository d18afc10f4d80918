package manager

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/errdefs"
)

// admission caps live sandboxes and concurrent creations. A creation that
// finds no room waits in a bounded queue for up to a timeout; when the
// queue is full, or the wait times out, it is refused with a retry hint.
type admission struct {
	mu          sync.Mutex
	live        int // sandboxes holding host resources (pool members too)
	creating    int
	waiting     int
	maxLive     int
	maxCreating int
	maxQueue    int
	timeout     time.Duration
	wake        chan struct{} // closed and replaced whenever room frees up
	met         *Metrics
}

func (a *admission) init(maxLive, maxCreating, maxQueue int, timeout time.Duration, met *Metrics) {
	a.maxLive, a.maxCreating, a.maxQueue, a.timeout, a.met = maxLive, maxCreating, maxQueue, timeout, met
	a.wake = make(chan struct{})
}

// acquire takes a live slot and a creation permit, waiting in the queue if
// needed. wait=false (pool refills) never queues.
func (a *admission) acquire(ctx context.Context, wait bool) error {
	var deadline <-chan time.Time
	a.mu.Lock()
	queued := false
	defer func() {
		if queued {
			a.waiting--
			a.met.queueDepth.Set(float64(a.waiting))
		}
		a.mu.Unlock()
	}()
	for {
		if a.live < a.maxLive && a.creating < a.maxCreating {
			a.live++
			a.creating++
			return nil
		}
		if !wait {
			return fmt.Errorf("at capacity: %w", errdefs.ErrExhausted)
		}
		if !queued {
			if a.waiting >= a.maxQueue {
				return &errdefs.RetryError{After: time.Second, Err: fmt.Errorf(
					"at capacity (%d live sandboxes of %d, %d creations waiting): %w", a.live, a.maxLive, a.waiting, errdefs.ErrExhausted)}
			}
			queued = true
			a.waiting++
			a.met.queueDepth.Set(float64(a.waiting))
			deadline = time.After(a.timeout)
		}
		wake := a.wake
		a.mu.Unlock()
		select {
		case <-wake:
		case <-deadline:
			a.mu.Lock()
			return &errdefs.RetryError{After: 5 * time.Second, Err: fmt.Errorf(
				"no room for a new sandbox within %v (%d live of %d): %w", a.timeout, a.live, a.maxLive, errdefs.ErrExhausted)}
		case <-ctx.Done():
			a.mu.Lock()
			return ctx.Err()
		}
		a.mu.Lock()
	}
}

// created releases the creation permit (the live slot stays).
func (a *admission) created() {
	a.mu.Lock()
	a.creating--
	a.signal()
	a.mu.Unlock()
}

// release frees a live slot.
func (a *admission) release() {
	a.mu.Lock()
	a.live--
	a.signal()
	a.mu.Unlock()
}

// adopt counts a sandbox that exists already (re-adopted at start).
func (a *admission) adopt() {
	a.mu.Lock()
	a.live++
	a.mu.Unlock()
}

// room reports whether a new sandbox could start now without waiting.
func (a *admission) room() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.live < a.maxLive && a.waiting == 0
}

// signal wakes the waiters. Call with a.mu held.
func (a *admission) signal() {
	close(a.wake)
	a.wake = make(chan struct{})
}
