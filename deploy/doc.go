// Package deploy holds no code: its tests check the files an operator
// applies or imports (DESIGN 15). The Prometheus configuration and alert
// rules in prometheus/ and the Grafana dashboard in grafana/ are checked
// against the metrics a running cluster exports; the Kubernetes manifests
// in kubernetes/ have their own package, the only one that links
// k8s.io/api.
package deploy
