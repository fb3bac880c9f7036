// Package deptest holds only a test: it checks the import graph of the
// module (as Tailscale's deptest does), so that the layering the design
// relies on is enforced, not a habit.
package deptest
