// Package kubernetes holds no code: its tests decode the manifests of this
// directory strictly into the Kubernetes API types (k8s.io/api) and check
// every reference against the cluster configuration they deploy
// (DESIGN 15). It is the only package of the module that links k8s.io/api.
package kubernetes
