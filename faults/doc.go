// Package faults is Switchyard's fault harness: loopback TCP proxies that
// cut, slow down and reset the links between gateways and NATS servers and
// between the NATS servers themselves, a NATS cluster and gateways wired
// through them, and a checker that takes the whole history of a run's
// publishes and reads to porcupine, a linearizability checker.
//
// # Proxies
//
// A Proxy forwards every connection made to its loopback port to one
// target. Each direction (Up: client to target, Down: target to client)
// can be cut (bytes are held, not lost, until healed: the peers hear
// silence, as with a partition that drops packets), delayed (Latency, with
// chunks in flight not waiting on each other) or made lossy (Drop: a
// fraction of chunks reset their connection instead, since TCP cannot
// drop bytes without stalling). Reset cuts every open connection at once.
//
// # The cluster
//
// Cluster runs three NATS servers in this process, each route between two
// of them going through a pair of proxies (one per dialling side), and
// gateways (router and JetStream engine in this process, or the gateway
// command in a child process: see below), each gateway's NATS connection
// going through a proxy of its own to each server. So a scenario can
// isolate one NATS server, cut the cluster 2/1, cut a gateway off NATS
// while its WebSocket clients stay connected, slow every link, stop a
// server and start it again on its store, or kill a gateway and start it
// again on its address.
//
// # Killing a gateway
//
// A gateway in this process is "killed" by KillGateway (gatewaykill.go):
// its NATS links are closed at the proxies without a drain, then its
// clients' connections, then it is shut down in the process; that is the
// kill-gateway-mid-pipeline scenario. The kill-9-gateway-process scenario
// kills one for real: gateway 2 runs the gateway command (cmd/gateway,
// built once per run by BuildGateway, with -race when the tests have it)
// in a child process, with --engine nats through its own proxies, and
// Kill9Gateway sends it SIGKILL with its publishers' pipelined publishes
// in flight, so no shutdown of any kind runs in it and the kernel ends
// its connections. It is started again on its address, and the run checks
// every history as the other scenarios do (linearizable logs, fan-out in
// order or in a gap, the group at least once), that some publishes were
// in flight when it died (cut off unanswered), that it died of the
// signal, and that no gateway process ended on its own or reported a data
// race. Each process leads a process group that its kill signals whole,
// is reaped by the cluster (Close kills what is left), and on Linux dies
// with the test binary (Pdeathsig) (gatewayproc.go); its output is shown
// when a test fails.
//
// A server cannot be paused with SIGSTOP here: the servers run in the
// test's process (the machine's nats-server binary is 2.9, older than the
// engine's replicated batches need). Pause emulates it by cutting every
// link of the server both ways, so its peers and clients hear silence and
// its timers keep running (a stopped process's do not); Kill shuts it down
// without a goodbye (its links are reset first) and Start brings it back
// on its store.
//
// # Histories
//
// Every publish a scenario makes is recorded with its call and return
// times and its answer (offset, unavailable, or unknown when the
// connection ended first); every read is recorded the same way. Check
// gives each partition's history to porcupine with a model of an
// append-only log: each acknowledged append has one offset, offsets are
// never reused or reordered, a record with a msg_id is stored once, and a
// read never shows a record that was not appended nor loses one that was
// acknowledged. A history that fails is written as porcupine's HTML
// visualization to a file the failure names, with what fast prechecks
// found (precheck.go). The load also checks fan-out (each subscriber gets
// every record in order or in a gap) and a consumer group (every record
// acked or dead-lettered, none delivered after an acknowledged ack).
//
// Scenarios lists the faults; Run runs one on a fresh cluster and returns
// its Report. The tests run each once; faults/cmd/faults is the long run.
// docs/faults.md has the results and the engine defects they found.
package faults
