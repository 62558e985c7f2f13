package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// listen wakes the fetcher when an enqueue or requeue in this queue commits
// (batchq notifies on the channel batchq_jobs with the queue's name), and
// tells it when the queue is paused (the name and " paused": no queue's
// name holds a space). Polling covers the gaps while it reconnects.
func (p *pool) listen(ctx context.Context) {
	const firstBackoff = 100 * time.Millisecond
	backoff := firstBackoff
	for ctx.Err() == nil {
		listened, err := p.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			backoff = firstBackoff // it was connected: a new interruption starts over
		}
		p.emit(Event{Kind: EventError, Err: fmt.Errorf("batchq: listen for notifications: %w", err)})
		p.log.Warn("notifications interrupted; polling until reconnected", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// listenOnce listens until the connection fails; it reports whether LISTEN
// took effect first.
func (p *pool) listenOnce(ctx context.Context) (bool, error) {
	conn, err := p.c.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer releaseListener(conn)
	if _, err := conn.Exec(ctx, "LISTEN batchq_jobs"); err != nil {
		return false, err
	}
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		switch n.Payload {
		case p.cfg.Queue:
			p.poke()
		case p.cfg.Queue + " paused":
			select {
			case p.pausedNow <- struct{}{}:
			default:
			}
		}
	}
}

// releaseListener returns a listening connection to the pool only after
// UNLISTEN; a connection that cannot be cleaned is closed instead.
func releaseListener(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, "UNLISTEN *"); err != nil {
		conn.Conn().Close(ctx)
	}
	conn.Release()
}
