// Package lab is the engine of the lab command: it re-runs the
// experiments behind holdfast's design against real redis-server processes,
// with the naive cache-aside read path (the "before" most services start
// from) beside holdfast in the same run.
//
// A Scenario fixes its parameters in a Plan and runs each Mode in turn on
// fresh processes. Most scenarios are a Traffic: an open-model schedule of
// reads (requests start at times fixed in advance, whatever earlier ones are
// doing, like k6's constant-arrival-rate executor, so a slow system cannot
// slow the sender down and hide its own tail) driven by a Driver against a
// Reader, a Source standing for the database (a latency and a concurrency
// cap, counting its calls per second), and Faults injected at set offsets:
// SIGSTOP, SIGKILL, a restart with empty memory, a slow or failing source.
// Each request's latency, measured from its scheduled start, goes to HDR
// histograms — overall, in the fault window, and per second for the chart.
// Write turns a Report into DIR/NAME.json (the lab's output schema, see
// Report), DIR/NAME.md (a table, one column per mode) and DIR/NAME.svg.
//
// A part that does not exist yet is reported as a MissingError: the lab
// prints it and exits non-zero, and never fakes the part.
package lab
