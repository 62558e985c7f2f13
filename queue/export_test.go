package queue

import "time"

// SetClock sets the clock c's quota store takes for this process's: a test
// runs two clients as two workers whose clocks disagree.
func SetClock(c *Client, now func() time.Time) { c.clock.now = now }
