// Package ids checks the identifiers the panel hands the node (server and backup UUIDs): one
// rule for every place that takes one from a request, a token, a file name or a definition.
package ids

// IsUUID reports whether s is a UUID in its canonical 36-character text form
// (8-4-4-4-12 hexadecimal digits, either case). Other forms uuid.Parse accepts (braces,
// "urn:uuid:", 32 digits without dashes) are refused: an id names directories and containers,
// so it has one spelling.
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
