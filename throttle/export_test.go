package throttle

import "time"

// SetClock replaces the clock and the timer factory Wait uses. Call it before
// the Throttle is shared.
func SetClock(t *Throttle, now func() time.Time, newTimer func(time.Duration) (<-chan time.Time, func() bool)) {
	t.init()
	t.now, t.newTimer = now, newTimer
}
