package ir

import (
	"slices"
	"testing"
)

func TestBelow(t *testing.T) {
	for _, c := range []struct {
		path, prefix string
		want         bool
	}{
		{"network.serviceCIDR", "network", true},
		{"network.serviceCIDR", "network.serviceCIDR", true},
		{"nodes.w01.taints[0]", "nodes.w01.taints", true},
		{"network2.x", "network", false},
		{"networ", "network", false},
		{"nodes.w010", "nodes.w01", false},
	} {
		if got := Below(c.path, c.prefix); got != c.want {
			t.Errorf("Below(%q, %q) = %v, want %v", c.path, c.prefix, got, c.want)
		}
	}
}

func TestNear(t *testing.T) {
	settings := []Setting{
		{Path: "network.serviceCIDR"}, {Path: "network.podCIDR"}, {Path: "network.cni.plugin"},
		{Path: "nodes.w01.address"}, {Path: "nodes.w01.taints[0]"}, {Path: "name"},
	}
	for _, c := range []struct {
		path string
		want []string
	}{
		{"netwrk", []string{"name", "network", "nodes"}},
		{"network.serviceCDR", []string{"network.cni", "network.podCIDR", "network.serviceCIDR"}},
		{"nodes.w01.taint", []string{"nodes.w01.address", "nodes.w01.taints"}},
		{"storage.classes", nil},
	} {
		if got := Near(settings, c.path); !slices.Equal(got, c.want) {
			t.Errorf("Near(%q) = %q, want %q", c.path, got, c.want)
		}
	}
}
