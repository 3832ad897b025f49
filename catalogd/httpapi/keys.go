package httpapi

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/holdfast-dev/holdfast/catalogd/catalog"
)

// Cache keys carry user input (a list's category, a search prefix), so they
// are built to two rules. They fit the cache's key limit for every input the
// documented limits accept: a key part is escaped only where it must be, so
// that 64 four-byte characters stay 256 bytes rather than the 768 of a
// percent-encoded form. And user input never carries a '{' or '}' into a key:
// in a Redis Cluster the part between braces (a hash tag) picks the slot, so
// a client could aim all its misses at one primary, and a lone brace would
// give a key and the tier's sibling keys different slots.

// keyEscaper replaces the bytes a key part must not contain: the braces of a
// hash tag, and '%' so that the escaping can be undone.
var keyEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// keyUnescaper undoes keyEscaper.
var keyUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

// The longest keys the Handler makes, for input at the documented limits: a
// list key with the longest sort name, page and size and a category of
// catalog.MaxCategoryLen four-byte characters, and a search key of
// catalog.MaxPrefixLen four-byte characters (an escaped byte is three bytes,
// fewer than a four-byte character). NewHandler refuses a policy whose
// MaxKeyBytes is smaller.
var (
	maxListKeyBytes   = maxListKey()
	maxSearchKeyBytes = catalog.MaxPrefixLen * utf8.UTFMax
)

func maxListKey() int {
	n := 0
	for _, s := range []catalog.Sort{catalog.SortName, catalog.SortPrice, catalog.SortPriceDesc, catalog.SortUpdated} {
		q := catalog.ListQuery{Category: strings.Repeat("\U0001F600", catalog.MaxCategoryLen), Page: catalog.MaxPage, Size: catalog.MaxPageSize, Sort: s}
		n = max(n, len(listKey(q)))
	}
	return n
}

// listKey is the cache key of a normalized query: every field explicit, in a
// fixed order, the category last so that no category can fake another field:
// "sort=name&size=20&page=1&category=toys".
func listKey(q catalog.ListQuery) string {
	return "sort=" + string(q.Sort) + "&size=" + strconv.Itoa(q.Size) + "&page=" + strconv.Itoa(q.Page) +
		"&category=" + keyEscaper.Replace(q.Category)
}

// parseListKey turns a key made by listKey back into its query. Keys are
// only ever made by listKey, so a failure here is a bug, reported as an
// error.
func parseListKey(key string) (catalog.ListQuery, error) {
	bad := func() (catalog.ListQuery, error) {
		return catalog.ListQuery{}, fmt.Errorf("catalogd http: bad list key %q", key)
	}
	rest, ok := strings.CutPrefix(key, "sort=")
	var sort, size, page, cat string
	for _, f := range []struct {
		dst *string
		sep string
	}{{&sort, "&size="}, {&size, "&page="}, {&page, "&category="}} {
		if !ok {
			return bad()
		}
		*f.dst, rest, ok = strings.Cut(rest, f.sep)
	}
	if !ok {
		return bad()
	}
	cat = keyUnescaper.Replace(rest)
	q := catalog.ListQuery{Category: cat, Sort: catalog.Sort(sort)}
	var err1, err2 error
	q.Size, err1 = strconv.Atoi(size)
	q.Page, err2 = strconv.Atoi(page)
	if err1 != nil || err2 != nil {
		return bad()
	}
	n, err := q.Normalize()
	if err != nil || n != q {
		return bad()
	}
	return q, nil
}

// searchKey is the cache key of a normalized search prefix.
func searchKey(prefix string) string { return keyEscaper.Replace(prefix) }

// searchPrefix turns a key made by searchKey back into its prefix.
func searchPrefix(key string) string { return keyUnescaper.Replace(key) }
