package bpe_test

import (
	"math"
	"strconv"
	"strings"
)

// commonWords are frequent English words, most frequent first; englishText
// draws from them with Zipf-like weights.
var commonWords = strings.Fields(`the of and to a in is it you that he was for on are with as I his they be at
one have this from or had by hot word but what some we can out other were all there when up use your how said an
each she which do their time if will way about many then them write would like so these her long make thing see him
two has look more day could go come did number sound no most people my over know water than call first who may down
side been now find any new work part take get place made live where after back little only round man year came show
every good me give our under name very through just form sentence great think say help low line differ turn cause
much mean before move right boy old too same tell does set three want air well also play small end put home read hand
port large spell add even land here must big high such follow act why ask men change went light kind off need house
picture try us again animal point mother world near build self earth father head stand own page should country found
answer school grow study still learn plant cover food sun four between state keep eye never last let thought city
tree cross farm hard start might story saw far sea draw left late run don't while press close night real life few
north open seem together next white children begin got walk example ease paper group always music those both mark
often letter until mile river car feet care second book carry took science eat room friend began idea fish mountain
stop once base hear horse cut sure watch color face wood main enough plain girl usual young ready above ever red list
though feel talk bird soon body dog family direct pose leave song measure door product black short numeral class wind
question happen complete ship area half rock order fire south problem piece told knew pass since top whole king space
heard best hour better true during hundred five remember step early hold west ground interest reach fast verb sing
listen six table travel less morning ten simple several vowel toward war lay against pattern slow center love person
money serve appear road map rain rule govern pull cold notice voice unit power town fine certain fly fall lead cry
dark machine note wait plan figure star box noun field rest correct able pound done beauty drive stood contain front
teach week final gave green oh quick develop ocean warm free minute strong special mind behind clear tail produce fact
street inch multiply nothing course stay wheel full force blue object decide surface deep moon island foot system busy
test record boat common gold possible plane stead dry wonder laugh thousand ago ran check game shape equate hot miss
brought heat snow tire bring yes distant fill east paint language among`)

// syllables build the rarer words of englishText.
var syllables = strings.Fields(`ab ac ad al am an ant ar as at ba be bi bo bu ca ce ci co con cu da de di do du
el em en er es et ex fa fe fi fo fu ga ge gi go gu ha he hi ho hu im in ing ion is it ja jo ka ke la le li lo lu ma
me mi mo mu na ne ni no nu ob of om on or os ous pa pe pi po pro pu qua ra re ri ro ru sa se si so st su ta te ter
ti to tion tu ul um un ur us va ve vi vo wa we wi wo ya yo za ze`)

var suffixes = []string{"s", "s", "ed", "ing", "er", "ly", "ness", "able"}

// rareWord returns word r of an endless English-looking lexicon.
func rareWord(r int) string {
	h := uint64(r)*0x9E3779B97F4A7C15 + 0xD1B54A32D192ED03
	next := func(k int) int {
		h ^= h >> 29
		h *= 0xBF58476D1CE4E5B9
		h ^= h >> 32
		return int(h % uint64(k))
	}
	var b strings.Builder
	for range 2 + next(3) {
		b.WriteString(syllables[next(len(syllables))])
	}
	return b.String()
}

// englishText returns about n bytes of English-like text, the same for the
// same seed: sentences of common words (some inflected) and of words from a
// long Zipf-distributed tail, with punctuation, numbers and paragraphs.
func englishText(n int, seed uint64) string {
	state := seed*6364136223846793005 + 1442695040888963407
	rnd := func(k int) int {
		state = state*6364136223846793005 + 1442695040888963407
		return int((state >> 33) % uint64(k))
	}
	// Zipf-like: a word's weight falls with its rank.
	cum := make([]int, len(commonWords))
	total := 0
	for i := range commonWords {
		total += 100000 / (i + 10)
		cum[i] = total
	}
	pick := func() string {
		switch rnd(10) {
		case 0, 1: // the tail: rank r with probability about 1/r
			return rareWord(int(math.Exp(float64(rnd(1<<20)) / (1 << 20) * math.Log(200_000))))
		case 2:
			return commonWords[rnd(len(commonWords))] + suffixes[rnd(len(suffixes))]
		}
		x := rnd(total)
		lo, hi := 0, len(cum)-1
		for lo < hi {
			mid := (lo + hi) / 2
			if cum[mid] > x {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		return commonWords[lo]
	}
	var b strings.Builder
	b.Grow(n + 200)
	for b.Len() < n {
		sentences := 2 + rnd(5)
		for s := range sentences {
			if s > 0 {
				b.WriteByte(' ')
			}
			words := 4 + rnd(14)
			for w := range words {
				word := pick()
				switch {
				case w == 0:
					word = strings.ToUpper(word[:1]) + word[1:]
				case rnd(40) == 0:
					word = strconv.Itoa(rnd(2000))
				}
				if w > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(word)
				if w > 0 && w < words-1 && rnd(9) == 0 {
					b.WriteByte(',')
				}
			}
			b.WriteString([]string{".", ".", ".", "?", "!"}[rnd(5)])
		}
		b.WriteString("\n\n")
	}
	return b.String()
}
