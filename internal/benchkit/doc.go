// Package benchkit holds the workloads batchq's benchmarks run, so the Go
// benchmarks (queue/bench_test.go) and `batchq bench` measure the same thing,
// for batchq's fair queue and for the plain FIFO SKIP LOCKED baselines
// (internal/fifo: one with batchq's rows, one lean) side by side, in one run
// on the same database.
//
// # Building blocks
//
// Backlog, SeedFair, SeedFIFO, DrainFair and DrainFIFO seed a backlog and
// drain it with goroutines that claim and complete in batches; the Go
// benchmarks use them directly.
//
// # Scenarios
//
// Drain, Flood, Scale, Quota and Enqueue are the system benchmarks behind
// `batchq bench SCENARIO`. Each runs in an Env (a migrated database that it
// may empty at will: CreateDatabase makes a throwaway one), does a warm-up
// run unless told not to, then Reps repetitions, and returns a Report: the
// machine, the parameters, tables whose cells are medians with their spread,
// and the bars as ratios measured in the same run. A Report prints
// as text (WriteText) or JSON (encoding/json).
//
// Drain runs its claimers in separate OS processes: it starts them with a
// Spawner (the batchq binary re-executing itself as `batchq bench-worker`),
// and each runs WorkerMain, which speaks a two-line protocol on its standard
// input and output.
//
// # Honest numbers
//
// Every timed run starts from emptied tables, a fresh seed, ANALYZE and a
// CHECKPOINT (when the role may), so runs are comparable; systems are
// interleaved within each repetition, so drift in the machine hits them
// alike. Tests run the scenarios at tiny sizes and check the shape and sanity
// of the numbers, never their speed.
package benchkit
