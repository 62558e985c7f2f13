// Package together runs independent reads at once.
package together

import "sync"

// All runs fns at once, waits for all of them, and returns the first of
// their errors in the order fns lists them (not the first to happen), so a
// caller sees the same error for the same failure however the reads
// interleave.
func All(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
