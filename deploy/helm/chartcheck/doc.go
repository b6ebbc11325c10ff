// Package chartcheck holds the test of the Switchyard Helm chart
// (deploy/helm/switchyard): it renders the chart with Helm's chart library
// for several value sets, decodes every object into its Kubernetes API type
// with unknown fields refused, and checks the objects against each other
// and against the gateway (its flags, its health endpoints).
//
// It is a module of its own so that Helm and the Kubernetes API modules stay
// out of the gateway's go.mod and its test builds; run it from this
// directory with `go test ./...`.
package chartcheck
