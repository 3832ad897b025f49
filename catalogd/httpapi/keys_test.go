package httpapi

import (
	"strings"
	"testing"

	"github.com/holdfast-dev/holdfast"
	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

// TestKeyLimitsAreConsistent: the longest key valid input can make fits the
// cache's default key limit, so that input within the documented limits is
// never refused for its key.
func TestKeyLimitsAreConsistent(t *testing.T) {
	c, err := holdfast.New(holdfast.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ns, err := c.Namespace("keys", holdfast.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if limit := ns.Policy().MaxKeyBytes; maxListKeyBytes > limit || maxSearchKeyBytes > limit {
		t.Errorf("longest keys: list %d, search %d bytes; the cache's limit is %d", maxListKeyBytes, maxSearchKeyBytes, limit)
	}
	for _, cat := range []string{strings.Repeat("{", catalog.MaxCategoryLen), strings.Repeat("\U0010FFFF", catalog.MaxCategoryLen)} {
		if n := len(listKey(catalog.ListQuery{Category: cat, Page: catalog.MaxPage, Size: catalog.MaxPageSize, Sort: catalog.SortUpdated})); n > maxListKeyBytes {
			t.Errorf("a list key of %d bytes, over the %d computed", n, maxListKeyBytes)
		}
	}
	if n := len(searchKey(strings.Repeat("%", catalog.MaxPrefixLen))); n > maxSearchKeyBytes {
		t.Errorf("a search key of %d bytes, over the %d computed", n, maxSearchKeyBytes)
	}
}

// FuzzKeys checks what the keys promise for any input the handlers accept:
// no brace, no more bytes than the computed maximum, and the query or
// prefix read back from the key is the one it was made from.
func FuzzKeys(f *testing.F) {
	f.Add("toys", "red")
	f.Add("{tag}", "{x}y")
	f.Add("%7B", "%25}")
	f.Add("a&page=2", "&category=")
	f.Fuzz(func(t *testing.T, category, prefix string) {
		if q, err := (catalog.ListQuery{Category: category}).Normalize(); err == nil {
			k := listKey(q)
			if strings.ContainsAny(k, "{}") || len(k) > maxListKeyBytes {
				t.Errorf("list key %q: a brace, or over %d bytes", k, maxListKeyBytes)
			}
			if back, err := parseListKey(k); err != nil || back != q {
				t.Errorf("list key %q reads back as %+v, %v; want %+v", k, back, err, q)
			}
		}
		if p, err := catalog.NormalizePrefix(prefix); err == nil {
			k := searchKey(p)
			if strings.ContainsAny(k, "{}") || len(k) > maxSearchKeyBytes {
				t.Errorf("search key %q: a brace, or over %d bytes", k, maxSearchKeyBytes)
			}
			if back := searchPrefix(k); back != p {
				t.Errorf("search key %q reads back as %q, want %q", k, back, p)
			}
		}
	})
}

// TestParseListKeyRefusesOthers: a key listKey did not make is an error,
// not a query.
func TestParseListKeyRefusesOthers(t *testing.T) {
	for _, k := range []string{"", "sort=name", "sort=name&size=20&page=1", "sort=name&size=x&page=1&category=", "sort=name&size=0&page=1&category=", "category=toys&page=1&size=20&sort=name"} {
		if q, err := parseListKey(k); err == nil {
			t.Errorf("parseListKey(%q) = %+v", k, q)
		}
	}
}
