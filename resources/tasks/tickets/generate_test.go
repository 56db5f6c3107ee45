// Package tickets is the sample decision task: Quillpad's support tickets, each
// routed to a team and judged for a refund. task.json defines the questions;
// rows.jsonl is written by the seeded generator in this file, which the test
// below re-runs to check that the committed rows are exactly what it produces:
//
//	go test ./resources/tasks/tickets -run TestGenerate -update
//
// The generator composes each ticket from parts — a main problem phrased one of
// many ways, details, a side remark about another team's topic, a refund request
// with a date that makes it due or not, a greeting, a signature — in one of
// several writing styles, with typos, misleading subject lines and signatures
// that name the wrong department, so the labels follow the problem and the
// policy rather than any single keyword.
package tickets

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unicode"
)

var update = flag.Bool("update", false, "rewrite rows.jsonl from the generator")

const (
	rowsFile = "rows.jsonl"
	seed     = 20261212
	numRows  = 2000
)

func TestGenerate(t *testing.T) {
	rows := generate(seed, numRows)
	var buf bytes.Buffer
	for _, r := range rows {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if *update {
		if err := os.WriteFile(rowsFile, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(rowsFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf.Bytes()) {
		t.Fatalf("%s differs from the generator's output; run go test -run TestGenerate -update", rowsFile)
	}
	checkVariety(t, rows)
}

// checkVariety guards the properties the task must show: size, balance, every
// hard case present, few repeated texts.
func checkVariety(t *testing.T, rows []row) {
	t.Helper()
	if len(rows) < 1000 {
		t.Fatalf("%d rows, want at least 1000", len(rows))
	}
	teams, refunds, states := map[string]int{}, map[string]int{}, map[string]bool{}
	for _, r := range rows {
		teams[r.Answers["team"]]++
		refunds[r.Answers["refund"]]++
		states[string(r.State)] = true
	}
	for _, team := range []string{"billing", "technical", "sales", "account"} {
		if teams[team] < len(rows)/10 {
			t.Errorf("team %s: %d rows, want at least %d", team, teams[team], len(rows)/10)
		}
	}
	if refunds["yes"] < len(rows)/10 || refunds["no"] < len(rows)/3 {
		t.Errorf("refund answers %v: too few of one", refunds)
	}
	if len(states) < len(rows)*99/100 {
		t.Errorf("%d distinct tickets in %d rows", len(states), len(rows))
	}
	for name, n := range stats {
		if n < 20 {
			t.Errorf("only %d tickets with %s", n, name)
		}
	}
}

// row is one line of rows.jsonl. Case says which hard case a ticket is (for
// reading the file and for per-case accuracy); decision models ignore it.
type row struct {
	State   json.RawMessage   `json:"state"`
	Answers map[string]string `json:"answers"`
	Case    string            `json:"case,omitempty"`
}

// stats counts the hard cases generated, for checkVariety.
var stats map[string]int

type gen struct{ r *rand.Rand }

func (g *gen) pick(s ...string) string { return s[g.r.IntN(len(s))] }
func (g *gen) chance(p float64) bool   { return g.r.Float64() < p }
func (g *gen) intn(lo, hi int) int     { return lo + g.r.IntN(hi-lo+1) }

// fill replaces {name} slots with values drawn for this ticket.
func (g *gen) fill(s string, slots map[string]string) string {
	for k, v := range slots {
		s = strings.ReplaceAll(s, "{"+k+"}", v)
	}
	return s
}

type ticket struct {
	team, refund, cse string
	subject           string
	parts             []string // body paragraphs/sentences in order
	style             string
}

func generate(seed uint64, n int) []row {
	stats = map[string]int{}
	g := &gen{r: rand.New(rand.NewPCG(seed, 0x5eed))}
	rows := make([]row, 0, n)
	for len(rows) < n {
		tk := g.ticket()
		rows = append(rows, g.render(tk))
	}
	return rows
}

func (g *gen) slots() map[string]string {
	amount := g.pick("$8.99", "$9.99", "$89.99", "$99", "€9.49", "€95", "£7.99", "£79", "$14.99", "$149")
	return map[string]string{
		"amount":  amount,
		"plan":    g.pick("Pro monthly", "Pro yearly", "Team", "Family", "Pro", "Personal", "Student"),
		"device":  g.pick("iPhone 13", "iPhone", "Pixel 7", "Samsung Galaxy S22", "Windows 11 laptop", "MacBook Air", "iPad", "Chromebook", "Ubuntu desktop", "work PC", "Surface Pro"),
		"device2": g.pick("my phone", "the web app", "my iPad", "my laptop", "the desktop app", "my work computer"),
		"version": fmt.Sprintf("%d.%d.%d", g.intn(3, 5), g.intn(0, 12), g.intn(0, 9)),
		"code":    g.pick("E-1042", "E-2210", "502", "500", "SYNC_TIMEOUT", "ERR_QUOTA", "0x80070005", "E-77", "403"),
		"seats":   g.pick("5", "8", "12", "15", "25", "40", "60", "120", "250", "a dozen", "about thirty", "fifty"),
		"company": g.pick("Brightline", "Northwind Traders", "Halcyon Labs", "Greenfield School", "Osprey Legal", "Kestrel & Co", "Marlow Studio", "Pinecrest Clinic", "Atlas Freight", "Bluebird Nonprofit"),
		"email":   g.pick("maria.l", "jtanaka", "sam.okafor", "p.novak", "lena_w", "chris1987", "d.moreau", "ana.s"),
		"domain":  g.pick("gmail.com", "outlook.com", "yahoo.com", "proton.me", "icloud.com"),
		"folder":  g.pick("Recipes", "Work", "Thesis", "Meeting notes", "Journal", "Clients", "Lecture notes", "Grocery"),
		"count":   g.pick("200", "about 40", "three years of", "hundreds of", "all my", "most of my", "12"),
		"card":    g.pick("Visa", "Mastercard", "Amex", "debit card", "PayPal", "company card"),
		"month":   g.pick("this month", "in March", "last month", "on the 3rd", "this week", "on my last statement"),
	}
}

// recent and old are when a payment was made, inside and outside the 14 days
// of the refund policy.
var recent = []string{
	"yesterday", "this morning", "two days ago", "3 days ago", "last Monday", "a week ago", "5 days ago",
	"earlier this week", "10 days ago", "an hour ago", "on Friday", "12 days ago", "just now", "four days ago",
}
var old = []string{
	"three weeks ago", "a month ago", "six weeks ago", "20 days ago", "last year", "two months ago", "45 days ago",
	"back in the spring", "over a year ago", "5 months ago", "in January", "30 days ago", "about 3 weeks ago", "last summer",
}

func (g *gen) ticket() ticket {
	tk := ticket{refund: "no", style: g.pick("formal", "casual", "casual", "terse", "angry", "rambling", "nonnative", "bullets", "chat")}
	s := g.slots()
	var main, subject []string
	var refundable bool // an erroneous charge: refunded whether asked or not
	r := g.r.Float64()
	switch {
	case r < 0.30:
		tk.team = "billing"
		main, subject, refundable = g.billing(s)
	case r < 0.58:
		tk.team = "technical"
		main, subject = g.technical(s)
	case r < 0.77:
		tk.team = "sales"
		main, subject = g.sales(s)
	default:
		tk.team = "account"
		main, subject = g.account(s)
	}
	tk.subject = g.pick(subject...)
	tk.parts = append(tk.parts, main...)

	// A side remark about another team's topic, which must not decide the team.
	if g.chance(0.28) {
		tk.parts = append(tk.parts, g.side(tk.team, s))
		stats["a side issue"]++
		tk.cse = "side-issue"
	}

	// The refund.
	switch {
	case refundable:
		tk.refund = "yes"
		if g.chance(0.6) {
			tk.parts = append(tk.parts, g.fill(g.pick(
				"Please refund the extra charge.",
				"I'd like that money back please.",
				"Can you reverse it?",
				"Refund please.",
				"Please put the {amount} back on my {card}.",
				"I expect a refund for this.",
			), s))
		}
		stats["a charge made by mistake"]++
		tk.cse = "mistaken-charge"
	case g.chance(map[string]float64{"billing": 0.55, "technical": 0.3, "sales": 0.1, "account": 0.3}[tk.team]):
		when := recent
		if g.chance(0.55) {
			when = old
			stats["a refund asked for and refused"]++
			tk.cse = "refund-refused"
		} else {
			tk.refund = "yes"
			stats["a refund asked for in time"]++
			tk.cse = "refund-in-time"
		}
		tk.parts = append(tk.parts, g.refundAsk(tk.team, g.pick(when...), s))
	case tk.team != "sales" && g.chance(0.08):
		tk.parts = append(tk.parts, g.pick(map[string][]string{
			"technical": {"I'm not asking for a refund, I just want it to work.", "No refund needed, just fix it please.",
				"I don't want my money back, I want the app to work.", "To be clear I am not after a refund."},
			"billing": {"I don't need a refund, just tell me what happened.", "No refund needed, I only want to understand it.",
				"To be clear I am not asking for my money back."},
			"account": {"No refund needed, I just want access back.", "I'm not asking for a refund, just help with the account.",
				"Don't refund me, I want to keep using it."},
		}[tk.team]...))
		stats["a refund mentioned but not asked for"]++
		tk.cse = "refund-declined-by-customer"
	}

	// Misleading subjects: another team's words, or nothing useful.
	switch x := g.r.Float64(); {
	case x < 0.16:
		others := []string{"billing", "technical", "sales", "account"}
		var o string
		for o = others[g.r.IntN(4)]; o == tk.team; o = others[g.r.IntN(4)] {
		}
		tk.subject = g.pick(map[string][]string{
			"billing":   {"Invoice question", "Billing", "Payment issue", "Charge on my card", "Receipt"},
			"technical": {"Bug report", "App crash", "Sync problem", "Technical issue", "Error message"},
			"sales":     {"Pricing for teams", "Quote request", "Question about plans", "Discount?", "Upgrade"},
			"account":   {"Login problem", "Account access", "Password", "My account", "Security question"},
		}[o]...)
		stats["a misleading subject"]++
		if tk.cse == "" {
			tk.cse = "misleading-subject"
		}
	case x < 0.30:
		tk.subject = g.pick("Help", "Help!!", "Question", "(no subject)", "Re: your email", "urgent", "Quillpad", "hello", "Problem", "Fwd: support")
	}
	return tk
}

func (g *gen) billing(s map[string]string) (main, subject []string, refundable bool) {
	switch g.r.IntN(9) {
	case 0:
		main = []string{g.fill(g.pick(
			"I was charged twice for my {plan} subscription {month}.",
			"My {card} shows two identical charges of {amount} from Quillpad {month}.",
			"You billed me {amount} two times on the same day.",
			"There's a duplicate payment on my account, {amount} taken twice {month}.",
			"Looks like the renewal went through twice, I see {amount} and {amount} again.",
		), s), g.fill(g.pick("I only have one account.", "I have one subscription, not two.", "My bank statement shows both.", "Both charges say QUILLPAD*PRO."), s)}
		return main, []string{"Charged twice", "Double charge", "Duplicate payment", "Two charges"}, true
	case 1:
		main = []string{g.fill(g.pick(
			"I cancelled my {plan} plan {when} but you still charged me {amount}.",
			"My subscription was cancelled {when}, yet {amount} was taken from my {card} again.",
			"Why was I billed {amount}? I cancelled {when} and got the confirmation email.",
			"I ended my subscription {when} and today there's another charge.",
		), merge(s, "when", g.pick(append(old, recent...)...))), g.pick("I have the cancellation email.", "I stopped using it after that.", "This should not have happened.", "")}
		return main, []string{"Charged after cancelling", "Cancelled but still billed", "Unexpected charge"}, true
	case 2:
		main = []string{g.fill(g.pick(
			"I chose the monthly plan but you charged me for a whole year, {amount}.",
			"I was upgraded to {plan} without agreeing to it and billed {amount}.",
			"The app charged me for the Family plan, I only ever picked Personal.",
			"I clicked on the free trial and got charged {amount} for {plan} straight away.",
		), s)}
		return main, []string{"Wrong plan charged", "I didn't choose this plan", "Charged for the wrong plan"}, true
	case 3:
		main = []string{g.fill(g.pick(
			"Could you send me an invoice with our VAT number on it?",
			"Our accounts team needs a proper invoice for the {amount} payment, with the company name {company}.",
			"I need invoices for the last three months for my expense report.",
			"Where can I download invoices? The receipt email doesn't have our address.",
			"Please reissue the invoice to {company} instead of my personal name.",
		), s)}
		return main, []string{"Invoice request", "VAT invoice", "Need an invoice", "Invoices"}, false
	case 4:
		main = []string{g.fill(g.pick(
			"My {card} was declined when the subscription renewed. How do I pay?",
			"I need to change the card you bill, the old {card} expired.",
			"The payment keeps failing with my new {card}.",
			"How can I switch from {card} to paying by bank transfer?",
		), s)}
		return main, []string{"Payment failed", "Update card", "Card declined", "Payment method"}, false
	case 5:
		main = []string{g.fill(g.pick(
			"Why did my price go up? I used to pay less and now it's {amount}.",
			"My renewal was {amount}, more than last year. Was there a price change?",
			"I don't understand the {amount} charge, what is it for?",
			"The tax on my bill looks wrong, I'm in Germany and got charged US sales tax.",
		), s)}
		return main, []string{"Price increase", "Question about my bill", "Tax on my bill", "Renewal price"}, false
	case 6:
		main = []string{g.fill(g.pick(
			"I signed up for {plan} but it isn't what I need.",
			"I bought the {plan} plan and honestly I don't use it.",
			"I paid {amount} for a year of Quillpad and I've changed my mind.",
			"I subscribed by accident while trying the app.",
			"The {plan} subscription turned out to be too expensive for me.",
		), s)}
		return main, []string{"Refund", "Cancel and refund", "Money back", "Subscription"}, false
	case 7:
		main = []string{g.fill(g.pick(
			"I never received a receipt for my {amount} payment.",
			"The receipt shows the wrong name, could you fix it?",
			"Can I get a receipt in euros for the {amount} charge?",
		), s)}
		return main, []string{"Receipt", "Missing receipt", "Receipt wrong"}, false
	default:
		main = []string{g.fill(g.pick(
			"Can I switch from monthly to yearly billing and keep my current price?",
			"When exactly will I be billed next? The app says one date, the email another.",
			"If I downgrade from {plan} to free, when does the billing stop?",
			"Is it possible to pay for two years at once?",
		), s)}
		return main, []string{"Billing question", "Billing cycle", "Next payment"}, false
	}
}

func (g *gen) technical(s map[string]string) (main, subject []string) {
	switch g.r.IntN(9) {
	case 0:
		main = []string{g.fill(g.pick(
			"My notes are not syncing between my {device} and {device2}.",
			"Sync stopped working. Notes I write on {device2} never show up on my {device}.",
			"Sync has been stuck on 'waiting' for two days.",
			"Changes I make on the {device} disappear after a sync, the old version comes back.",
		), s), g.fill(g.pick("I'm on version {version}.", "I already logged out and back in.", "Reinstalling did not help.", "The sync icon just spins.", "It says {code}."), s)}
		return main, []string{"Sync not working", "Notes not syncing", "Sync issue", "Sync stuck"}
	case 1:
		main = []string{g.fill(g.pick(
			"The app crashes as soon as I open it on my {device}.",
			"Since the update to {version} Quillpad closes itself when I open the {folder} notebook.",
			"Every time I paste an image the app freezes and then crashes.",
			"The desktop app shows a white screen and quits.",
		), s), g.fill(g.pick("Version {version}.", "I restarted the {device} twice.", "It worked fine last week.", "I can send logs if you need them."), s)}
		return main, []string{"App crash", "Crashes on start", "Quillpad keeps crashing", "Freezing"}
	case 2:
		main = []string{g.fill(g.pick(
			"Export to PDF produces an empty file.",
			"When I export the {folder} notebook to Markdown the images are missing.",
			"PDF export fails with error {code}.",
			"Printing a note cuts off the last page.",
		), s)}
		return main, []string{"Export broken", "PDF export", "Export problem"}
	case 3:
		main = []string{g.fill(g.pick(
			"After the latest update {count} notes in {folder} are gone.",
			"My {folder} notebook is empty this morning, it had {count} notes yesterday.",
			"Notes I wrote last week vanished from search and from the notebook.",
		), s), g.pick("The trash is empty too.", "Please tell me they can be recovered.", "I have no other copy.", "")}
		return main, []string{"Lost notes", "Notes disappeared", "Missing notes", "Data loss!!"}
	case 4:
		main = []string{g.fill(g.pick(
			"The app is extremely slow on my {device}, typing lags by a second.",
			"Search takes almost a minute since I passed {count} notes.",
			"Opening a notebook takes forever on {device2}.",
		), s)}
		return main, []string{"Very slow", "Performance", "Lag"}
	case 5:
		main = []string{g.fill(g.pick(
			"I can't attach PDFs, the upload fails with {code}.",
			"Uploading images gives me error {code} on {device2}.",
			"Attachments over 5 MB never finish uploading.",
		), s)}
		return main, []string{"Upload error", "Attachments", "Error " + s["code"]}
	case 6:
		main = []string{g.fill(g.pick(
			"The Google Calendar integration stopped creating notes for my meetings.",
			"The Slack integration posts every note twice.",
			"The browser clipper saves pages without their text.",
			"Zapier says the Quillpad connection is broken with {code}.",
		), s)}
		return main, []string{"Integration broken", "Calendar integration", "Clipper", "Slack"}
	case 7:
		// Sign-in failures caused by the service, not by the account: technical.
		main = []string{g.fill(g.pick(
			"The login page shows error {code} for everyone in our office, my password is correct.",
			"When I sign in the page reloads forever and then says {code}.",
			"Sign in with Google returns a blank page since the {version} release.",
		), s)}
		return main, []string{"Login problem", "Can't log in", "Sign in error"}
	default:
		main = []string{g.fill(g.pick(
			"Reminders don't fire on my {device} anymore.",
			"Dark mode makes the text invisible in tables.",
			"The checkbox lists lose their ticks when I reopen a note.",
			"Handwriting on the {device} lags and strokes disappear.",
		), s)}
		return main, []string{"Bug", "Reminders broken", "Display bug", "Something is wrong"}
	}
}

func (g *gen) sales(s map[string]string) (main, subject []string) {
	switch g.r.IntN(7) {
	case 0:
		main = []string{g.fill(g.pick(
			"We'd like a quote for {seats} seats of the Team plan for {company}.",
			"How much would Quillpad cost for a team of {seats}?",
			"I'm looking at Quillpad for {company}, we're {seats} people. What's the pricing?",
			"Can you send pricing for {seats} users on a yearly contract?",
		), s)}
		return main, []string{"Quote", "Team pricing", "Pricing for " + s["seats"] + " users", "Team plan"}
	case 1:
		main = []string{g.fill(g.pick(
			"Before we buy, our security team needs your SOC 2 report and a filled questionnaire.",
			"Does the Enterprise plan support SSO with Okta? We're evaluating tools for {company}.",
			"We need a data processing agreement signed before purchasing for {seats} staff.",
		), s)}
		return main, []string{"Security review", "Enterprise evaluation", "SSO", "DPA"}
	case 2:
		main = []string{g.fill(g.pick(
			"Do you offer a discount for nonprofits? We're {company}.",
			"Is there education pricing for a school of {seats} teachers?",
			"We are a charity, can we get Quillpad at a reduced price?",
		), s)}
		return main, []string{"Nonprofit discount", "Education pricing", "Discount for charity"}
	case 3:
		main = []string{g.fill(g.pick(
			"Could someone give our team a demo next week?",
			"I'd like to book a call to see how Quillpad would work for {company}.",
			"Can we schedule a walkthrough with your sales team for {seats} of our managers?",
		), s)}
		return main, []string{"Demo request", "Book a call", "Walkthrough"}
	case 4:
		main = []string{g.fill(g.pick(
			"We resell software in Poland and would like to become a partner.",
			"I run a consultancy and want to offer Quillpad to my clients, is there a partner program?",
			"Is there an affiliate program for Quillpad?",
		), s)}
		return main, []string{"Partnership", "Reseller", "Affiliate program"}
	case 5:
		main = []string{g.fill(g.pick(
			"We're thinking of moving {company} from Evernote. Does the Team plan include shared notebooks and admin controls?",
			"Before I upgrade our company, does the Business tier include audit logs?",
			"What's the difference between Team and Enterprise for a company of {seats}?",
		), s)}
		return main, []string{"Plans", "Team vs Enterprise", "Question before buying", "Evaluating Quillpad"}
	default:
		main = []string{g.fill(g.pick(
			"We want to buy {seats} licenses and pay by purchase order. Is that possible?",
			"Our procurement needs a formal offer for {seats} Team seats for {company}.",
			"Could we get volume pricing if we add {seats} more seats this year?",
		), s)}
		return main, []string{"Purchase order", "Volume licensing", "Procurement"}
	}
}

func (g *gen) account(s map[string]string) (main, subject []string) {
	switch g.r.IntN(8) {
	case 0:
		main = []string{g.fill(g.pick(
			"I forgot my password and the reset email never arrives.",
			"Password reset link says it expired every time I click it.",
			"I can't remember my password and I no longer know which email I used.",
		), s), g.fill(g.pick("I checked spam.", "My address is {email}@{domain}.", "I tried three times.", ""), s)}
		return main, []string{"Password reset", "Forgot password", "Reset link not working"}
	case 1:
		main = []string{g.fill(g.pick(
			"I need to change the email on my account to {email}@{domain}.",
			"I left my job, please move my account from my work email to {email}@{domain}.",
			"How do I update the email address I sign in with?",
		), s)}
		return main, []string{"Change email", "New email address", "Update login email"}
	case 2:
		main = []string{g.fill(g.pick(
			"I lost my phone and with it the two-factor codes. I can't sign in.",
			"My authenticator app was wiped and I can't get past two-factor.",
			"I changed phones and the 2FA codes don't work anymore.",
		), s)}
		return main, []string{"Two-factor", "Lost 2FA", "Locked out", "2FA problem"}
	case 3:
		main = []string{g.fill(g.pick(
			"Please delete my account and all my data.",
			"Under GDPR I request that you erase my account {email}@{domain}.",
			"How do I close my Quillpad account permanently?",
		), s)}
		return main, []string{"Delete account", "GDPR request", "Close my account"}
	case 4:
		main = []string{g.fill(g.pick(
			"I accidentally created two accounts, can you merge them?",
			"I have one account with Google sign-in and one with {email}@{domain}, please combine them.",
		), s)}
		return main, []string{"Merge accounts", "Two accounts", "Duplicate account"}
	case 5:
		main = []string{g.fill(g.pick(
			"My account got locked after too many sign-in attempts.",
			"It says my account is suspended for suspicious activity, I did nothing wrong.",
			"Someone else may have logged into my account, I got an alert from {device2}.",
		), s)}
		return main, []string{"Account locked", "Suspended account", "Suspicious login", "Security"}
	case 6:
		main = []string{g.fill(g.pick(
			"Our workspace owner left {company}. How do I transfer ownership to me?",
			"Please make me the admin of our team workspace, the old admin is gone.",
		), s)}
		return main, []string{"Transfer ownership", "Workspace admin", "Owner left"}
	default:
		main = []string{g.fill(g.pick(
			"How can I change my username? It still shows my maiden name.",
			"I want to change the name on my profile.",
		), s)}
		return main, []string{"Change username", "Profile name", "Name change"}
	}
}

// side is a remark about another team's topic, clearly secondary.
func (g *gen) side(team string, s map[string]string) string {
	intro := g.pick("Also, unrelated: ", "Side note, ", "PS: ", "One more small thing, ", "Not important but ", "By the way, ")
	var pool []string
	if team != "billing" {
		pool = append(pool, "your invoice email has a typo in the footer.", "I might switch to yearly billing at some point.", "the receipt came in dollars, which is fine.")
	}
	if team != "technical" {
		pool = append(pool, "the dark mode looks a bit off on my {device}.", "the app felt slow last week but it's fine now.", "search sometimes misses a note, no big deal.")
	}
	if team != "sales" {
		pool = append(pool, "my company may want a team plan next year.", "do you have student discounts? Asking for my son.", "a colleague asked about pricing for teams.")
	}
	if team != "account" {
		pool = append(pool, "I'll change my email address at some point.", "I have 2FA on and it works great.", "I also forgot my password once last year but sorted it.")
	}
	return intro + g.fill(g.pick(pool...), s)
}

func (g *gen) refundAsk(team, when string, s map[string]string) string {
	s = merge(s, "when", when)
	var opts []string
	switch team {
	case "billing":
		opts = []string{
			"I paid {when}, can I get a refund?",
			"The payment was {when}. Please refund it.",
			"I'd like my money back, I subscribed {when}.",
			"Can you cancel it and return the {amount}? I bought it {when}.",
			"I was charged {when} and want a full refund.",
			"Please reverse the {amount} payment from {when}.",
		}
	case "technical":
		opts = []string{
			"I bought Pro {when} and if this isn't fixed I want my money back.",
			"Honestly I'd like a refund, I paid {when} and it doesn't work.",
			"I subscribed {when}, please refund me, this is unusable.",
			"Given this bug I want a refund for the payment {when}.",
		}
	case "sales":
		opts = []string{
			"Also we bought a single seat {when} to test it, could that be refunded once we sign?",
			"I paid for a personal plan {when}, can that be refunded when we move to Team?",
		}
	default:
		opts = []string{
			"And refund my subscription, I paid {when}.",
			"I want the rest of my plan refunded, I renewed {when}.",
			"Please refund what I paid {when} as well.",
			"Since I can't use the account I'd like my money back, the charge was {when}.",
		}
	}
	return g.fill(g.pick(opts...), s)
}

func merge(s map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(s)+1)
	for a, b := range s {
		out[a] = b
	}
	out[k] = v
	return out
}

var names = []string{"Maria Lopez", "James Tanaka", "Sam Okafor", "Petra Novak", "Lena Weber", "Chris", "Dominique Moreau",
	"Ana Silva", "Raj Patel", "Emily", "Tom Becker", "Yuki", "Fatima Haddad", "Olaf", "Grace Kim", "Luis Ortega"}

func (g *gen) signature(name string, s map[string]string) string {
	first := strings.Fields(name)[0]
	return g.fill(g.pick(
		"Thanks,\n"+first,
		"Best regards,\n"+name,
		"Cheers, "+first,
		"-- \n"+name+"\n{company}",
		name+"\nHead of Sales, {company}",     // a signature naming another team
		name+"\nAccounts Payable | {company}", // likewise
		name+"\nIT Support Lead, {company}",   // likewise
		"Sent from my iPhone",
		"Regards\n"+name+"\n\nThis email and any attachments are confidential and intended solely for the addressee.",
		first,
		"thx",
		"",
	), s)
}

func (g *gen) greeting(style string) string {
	switch style {
	case "formal", "bullets":
		return g.pick("Dear Quillpad support,", "Hello,", "Dear Sir or Madam,", "Good morning,", "To whom it may concern,")
	case "angry":
		return g.pick("", "Hello??", "This is the third time I write.", "Seriously.")
	case "terse", "chat":
		return g.pick("", "", "hi", "hey")
	case "nonnative":
		return g.pick("Hello dear support,", "Good day,", "Hi team,", "Dear support team,")
	}
	return g.pick("Hi,", "Hi there,", "Hey,", "Hello,", "Hi Quillpad team,")
}

func (g *gen) render(tk ticket) row {
	s := g.slots()
	name := g.pick(names...)
	parts := append([]string(nil), tk.parts...)
	if tk.style == "rambling" {
		parts = append([]string{g.fill(g.pick(
			"I've been using Quillpad for my {folder} notes for a while and mostly love it.",
			"So, long story, but bear with me.",
			"I hope you're having a good week, mine has been hectic.",
			"I'm writing from the train so sorry for the mess.",
		), s)}, parts...)
		parts = append(parts, g.pick("Anyway, that's it.", "Sorry for the long email.", "Hope that makes sense!"))
	}
	var body string
	switch tk.style {
	case "bullets":
		lines := []string{g.greeting(tk.style), "", "Details:"}
		for _, p := range parts {
			if p != "" {
				lines = append(lines, "- "+p)
			}
		}
		body = strings.Join(lines, "\n")
	case "terse", "chat":
		body = strings.Join(nonEmpty(parts), " ")
		if g.chance(0.6) {
			body = strings.ToLower(body)
		}
		if g.chance(0.5) {
			// Punctuation dropped between words only: amounts and versions keep their dots.
			body = strings.TrimSuffix(strings.NewReplacer(". ", " ", ", ", " ", "'", "", "? ", " ").Replace(body), ".")
		}
		if gr := g.greeting(tk.style); gr != "" {
			body = gr + " " + body
		}
	case "angry":
		body = strings.Join(nonEmpty(parts), " ")
		body = strings.TrimSuffix(body, ".") + g.pick("!!", "!!!", ". Unacceptable.", ". Fix this NOW.", ".")
		if gr := g.greeting(tk.style); gr != "" {
			body = gr + " " + body
		}
	case "nonnative":
		body = g.greeting(tk.style) + "\n" + nonnative(strings.Join(nonEmpty(parts), " "))
	default:
		body = g.greeting(tk.style) + "\n\n" + strings.Join(nonEmpty(parts), " ")
	}
	if tk.style != "chat" {
		if sig := g.signature(name, s); sig != "" {
			body += "\n\n" + sig
		}
	}
	if g.chance(0.05) {
		body = "---------- Forwarded message ---------\nFrom: " + name + "\n\n" + body
	}
	typo := map[string]float64{"terse": 0.05, "chat": 0.07, "angry": 0.04, "casual": 0.02, "rambling": 0.02, "nonnative": 0.03}[tk.style]
	body = g.typos(strings.TrimSpace(body), typo)
	subject := tk.subject
	if tk.style == "angry" && g.chance(0.5) {
		subject = strings.ToUpper(subject)
	}
	subject = g.typos(subject, typo/2)

	var state []byte
	if tk.style == "chat" {
		// Chat transcripts are free text.
		state, _ = json.Marshal("Chat with " + name + ": " + body)
	} else {
		state, _ = json.Marshal(struct {
			Subject string `json:"subject"`
			Body    string `json:"body"`
		}{subject, body})
	}
	answers := map[string]string{"team": tk.team, "refund": tk.refund}
	switch x := g.r.Float64(); { // some rows answer one question only
	case x < 0.06:
		delete(answers, "refund")
	case x < 0.10:
		delete(answers, "team")
	}
	return row{State: state, Answers: answers, Case: tk.cse}
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// nonnative rewrites a few idioms the way some writers of English as a second
// language do.
func nonnative(s string) string {
	return strings.NewReplacer(
		"I can't", "I cannot", "doesn't", "is not", "I'd like", "I would like to have", "Could you", "Please can you",
		"don't", "do not", " the app", " app", "since", "from", "Please", "Kindly",
	).Replace(s)
}

// typos mangles a share p of the words: a swapped, dropped, doubled or
// neighbouring letter.
func (g *gen) typos(s string, p float64) string {
	if p == 0 {
		return s
	}
	words := strings.Split(s, " ")
	for i, w := range words {
		r := []rune(w)
		if len(r) < 4 || !g.chance(p) || !unicode.IsLetter(r[1]) {
			continue
		}
		j := 1 + g.r.IntN(len(r)-2)
		switch g.r.IntN(4) {
		case 0:
			r[j], r[j+1] = r[j+1], r[j]
		case 1:
			r = append(r[:j], r[j+1:]...)
		case 2:
			r = append(r[:j+1], r[j:]...)
		default:
			if n, ok := neighbours[unicode.ToLower(r[j])]; ok {
				r[j] = rune(n[g.r.IntN(len(n))])
			}
		}
		words[i] = string(r)
	}
	stats["typos"]++
	return strings.Join(words, " ")
}

var neighbours = map[rune]string{
	'a': "qs", 'e': "wr", 'i': "uo", 'o': "ip", 'n': "bm", 'r': "et", 's': "ad", 't': "ry", 'l': "k", 'c': "xv", 'u': "yi", 'm': "n",
}
