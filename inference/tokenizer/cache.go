package tokenizer

import (
	"strings"
	"sync"
)

// wordCache remembers the ids of recently seen words. It keeps two
// generations: lookups promote from the old one, and when the current one is
// full the old one is dropped — a bounded, O(1) approximation of LRU.
type wordCache struct {
	mu       sync.Mutex
	cur, old map[string][]int
	capacity int
}

// maxCachedWord is the longest word (in bytes) worth caching; longer ones are
// rarely seen twice.
const maxCachedWord = 256

func newWordCache(capacity int) *wordCache {
	return &wordCache{cur: make(map[string][]int), capacity: capacity}
}

func (c *wordCache) get(word string) ([]int, bool) {
	if len(word) > maxCachedWord {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ids, ok := c.cur[word]; ok {
		return ids, true
	}
	if ids, ok := c.old[word]; ok {
		c.insert(word, ids)
		return ids, true
	}
	return nil, false
}

func (c *wordCache) put(word string, ids []int) {
	if len(word) > maxCachedWord {
		return
	}
	// Clone: word may be a slice of a long text the cache must not keep alive.
	word, ids = strings.Clone(word), append([]int(nil), ids...)
	c.mu.Lock()
	c.insert(word, ids)
	c.mu.Unlock()
}

func (c *wordCache) insert(word string, ids []int) {
	if len(c.cur) >= c.capacity {
		c.old, c.cur = c.cur, make(map[string][]int, c.capacity)
	}
	c.cur[word] = ids
}
