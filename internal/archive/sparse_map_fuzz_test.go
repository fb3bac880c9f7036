package archive

import "testing"

// FuzzSparseMap0x: the map of the PAX sparse formats 0.0/0.1 (a user's
// archive, through files/decompress) never panics, and what it accepts is in
// order, within the size, and adds up to the data it reports.
func FuzzSparseMap0x(f *testing.F) {
	f.Add("0,512,4096,0", int64(4096))
	f.Add("1,2,3", int64(10))
	f.Add("9223372036854775807,1", int64(1<<62))
	f.Add("", int64(0))
	f.Fuzz(func(t *testing.T, m string, size int64) {
		frags, data, err := sparseMap0x(m, size)
		if err != nil {
			return
		}
		var end, sum int64
		for _, fr := range frags {
			if fr.off < end || fr.n < 0 || fr.off+fr.n > size {
				t.Fatalf("accepted %q (size %d): fragment %+v", m, size, fr)
			}
			end, sum = fr.off+fr.n, sum+fr.n
		}
		if sum != data {
			t.Fatalf("data %d, fragments add up to %d", data, sum)
		}
	})
}
