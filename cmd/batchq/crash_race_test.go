//go:build race

package main

// raceEnabled is whether the tests were built with -race; the crash test
// builds the binary the same way, so it reuses the test build's cache.
const raceEnabled = true
