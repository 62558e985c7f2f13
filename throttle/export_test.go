package throttle

import "time"

// SetTimer replaces the timer Wait and Admit sleep on, so a test on a clock
// it sets (Config.Now) decides when a wait is over. Call it before the
// Throttle is shared.
func SetTimer(t *Throttle, newTimer func(time.Duration) (<-chan time.Time, func() bool)) {
	t.init()
	t.newTimer = newTimer
}
