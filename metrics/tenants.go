package metrics

import (
	"cmp"
	"slices"
	"sync"
)

// other is the tenant label of everything outside the named tenants.
const other = "other"

// tenantLabels decides which tenants get a label of their own, per queue: the
// top n by backlog at the latest refresh, and up to n more that were among
// the top most recently, so that a tenant's last events after its backlog is
// gone are still counted under its name. Between refreshes, a tenant's first
// event names it while its queue has fewer than n names, so that a queue that
// has had at most n tenants names them all from their first events; a later
// newcomer may wait for a refresh (names go only past 2n).
//
// Whoever records a per-tenant series holds mu for reading from choosing the
// label to recording, and refresh deletes a dropped tenant's series under the
// write lock, so a dropped tenant's series is never recreated.
type tenantLabels struct {
	mu   sync.RWMutex
	n    int
	tick uint64
	// last is, per queue and named tenant, the refresh at which the tenant was
	// last among the top.
	last map[string]map[string]uint64
	// admits reports whether events may name tenants of a queue; nil: none.
	admits func(queue string) bool
}

func newTenantLabels(n int, admits func(queue string) bool) *tenantLabels {
	return &tenantLabels{n: n, last: map[string]map[string]uint64{}, admits: admits}
}

// labelLocked returns tenant's label in queue; mu must be held.
func (l *tenantLabels) labelLocked(queue, tenant string) string {
	if _, ok := l.last[queue][tenant]; ok {
		return tenant
	}
	return other
}

// record calls fn with tenant's label in queue, holding mu so a refresh
// cannot drop the tenant midway; for an unnamed tenant of a queue with room,
// it names the tenant first.
func (l *tenantLabels) record(queue, tenant string, fn func(label string)) {
	l.mu.RLock()
	if !l.roomLocked(queue, tenant) {
		defer l.mu.RUnlock()
		fn(l.labelLocked(queue, tenant))
		return
	}
	l.mu.RUnlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.roomLocked(queue, tenant) {
		m := l.last[queue]
		if m == nil {
			m = map[string]uint64{}
			l.last[queue] = m
		}
		m[tenant] = l.tick
	}
	fn(l.labelLocked(queue, tenant))
}

// roomLocked reports whether tenant is unnamed and may be named in queue
// now; mu must be held.
func (l *tenantLabels) roomLocked(queue, tenant string) bool {
	if l.admits == nil || tenant == other || tenant == "" || len(l.last[queue]) >= l.n {
		return false
	}
	_, named := l.last[queue][tenant]
	return !named && l.admits(queue)
}

// named returns the named tenants of every queue, by queue.
func (l *tenantLabels) named() map[string][]string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	named := make(map[string][]string, len(l.last))
	for q, ts := range l.last {
		for t := range ts {
			named[q] = append(named[q], t)
		}
	}
	return named
}

// namedIn returns the named tenants of queue.
func (l *tenantLabels) namedIn(queue string) []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]string, 0, len(l.last[queue]))
	for t := range l.last[queue] {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// refresh records the tenants now at the top of each queue in top (a queue
// absent from top keeps its names) and drops the least recent leavers past
// 2n, calling drop for each under the write lock.
func (l *tenantLabels) refresh(top map[string][]string, drop func(queue, tenant string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tick++
	for q, tenants := range top {
		m := l.last[q]
		if m == nil {
			m = map[string]uint64{}
			l.last[q] = m
		}
		for _, t := range tenants {
			if t != other && len(t) > 0 {
				m[t] = l.tick
			}
		}
		if len(m) <= 2*l.n {
			continue
		}
		names := make([]string, 0, len(m))
		for t := range m {
			names = append(names, t)
		}
		// Most recently at the top first; the name only makes it deterministic.
		slices.SortFunc(names, func(a, b string) int {
			return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b))
		})
		for _, t := range names[2*l.n:] {
			delete(m, t)
			drop(q, t)
		}
	}
}
