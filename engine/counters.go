package engine

// Counted is an optional capability of an Engine: counts of events inside
// the engine that an operator should see, each only ever growing from
// the engine's start. The gateway publishes each as a counter,
// switchyard_engine_<name>_total, reading them at each scrape through a
// type assertion; an engine without such events need not implement it.
type Counted interface {
	// Counters returns the engine's counters, the same names in the
	// same order at every call. It must be cheap (atomic loads) and safe
	// for concurrent use.
	Counters() []Counter
}

// Counter is one of an engine's counts: Name is lower case with
// underscores (the metric's name is switchyard_engine_<Name>_total), Help
// says what it counts.
type Counter struct {
	Name  string
	Help  string
	Value int64
}
