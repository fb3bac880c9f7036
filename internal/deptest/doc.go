// Package deptest holds only a test: it checks the import graph of the
// module (as Tailscale's deptest does), so that the layering the design
// relies on is enforced, not a habit. The rules are a table in
// deptest_test.go, each with the reason a violation prints; ARCHITECTURE.md
// describes the tiers they protect.
package deptest
