package queue

import (
	"testing"
	"time"
)

// FuzzParseCron: an expression and a time zone either parse, and then every
// tick planned from any due time and any later time keeps planTick's
// promises (the latest tick that passed, the first after), or are refused
// naming the cron or the timezone field.
func FuzzParseCron(f *testing.F) {
	for _, seed := range []struct{ expr, tz string }{
		{"0 2 * * *", "Europe/Paris"}, {"30 2 * * *", "Europe/Paris"}, {"@every 2s", ""}, {"@daily", "UTC"},
		{"*/15 9-17 * * 1-5", "America/New_York"}, {"0 0 29 2 *", ""}, {"0 0 30 2 *", ""}, {"0 25 * * *", ""},
		{"CRON_TZ=Asia/Tokyo 0 9 * * *", ""}, {"@every 1s", "Mars/Base"}, {"", ""}, {"@every 0s", ""},
	} {
		f.Add(seed.expr, seed.tz, int64(0), int64(3600))
	}
	// Weeks without a worker: more ticks than a walk one by one takes.
	f.Add("@every 1s", "", int64(0), int64(29*24*3600))
	f.Add("* * * * *", "Europe/Paris", int64(0), int64(29*24*3600))
	base := time.Date(2026, 3, 28, 23, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr, tz string, dueOffset, lateness int64) {
		s, err := parseCron(expr, tz)
		if err != nil {
			if err.Field != "cron" && err.Field != "timezone" {
				t.Fatalf("refused naming %q: %v", err.Field, err)
			}
			return
		}
		due := base.Add(time.Duration(dueOffset%(366*24*3600)) * time.Second)
		at := due.Add(time.Duration(lateness%(30*24*3600)+30*24*3600) % (30 * 24 * 3600) * time.Second)
		tick, enqueue, next := planTick(s, due, at, MissedSkip)
		if tick.Before(due) || tick.After(at) {
			t.Fatalf("tick %s outside [due %s, at %s]", tick, due, at)
		}
		if n := s.Next(tick); !n.IsZero() && !n.After(at) {
			t.Fatalf("tick %s is not the latest at %s: %s is later", tick, at, n)
		}
		if !next.After(at) {
			t.Fatalf("next tick %s not after %s", next, at)
		}
		if enqueue != (at.Sub(tick) <= ScheduleGrace) {
			t.Fatalf("skip: enqueue %v for a tick found %s late", enqueue, at.Sub(tick))
		}
		if _, one, _ := planTick(s, due, at, MissedOne); !one {
			t.Fatal("one: the latest missed tick enqueues")
		}
	})
}
