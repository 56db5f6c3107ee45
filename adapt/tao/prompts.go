package tao

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Limits of a prompt file.
const (
	MaxPromptBytes = 64 << 10 // one prompt
	MaxPrompts     = 100_000
)

// ParsePrompts reads a prompt file: one prompt per line, either as plain text
// or as a JSON object with a "prompt" string (the prompt side of a
// {"prompt", "completion"} dataset; the completion, if any, is ignored — TAO
// needs no answers). Blank lines and lines starting with # are skipped. A
// line that is not valid UTF-8, too long, or a JSON object without a prompt
// is an error naming its line.
func ParsePrompts(r io.Reader) ([]string, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var out []string
	for line := 1; ; line++ {
		raw, err := readLine(br, MaxPromptBytes)
		if errors.Is(err, errLineTooLong) {
			return nil, fmt.Errorf("tao: prompts: line %d is longer than %d bytes", line, MaxPromptBytes)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("tao: prompts: line %d: %w", line, err)
		}
		if p, perr := parsePromptLine(raw); perr != nil {
			return nil, fmt.Errorf("tao: prompts: line %d: %s", line, perr)
		} else if p != "" {
			if len(out) == MaxPrompts {
				return nil, fmt.Errorf("tao: prompts: more than %d prompts", MaxPrompts)
			}
			out = append(out, p)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
	}
}

// parsePromptLine is one line's prompt, "" for a line to skip.
func parsePromptLine(raw []byte) (string, error) {
	s := strings.TrimSpace(strings.TrimSuffix(string(raw), "\r"))
	if !utf8.ValidString(s) {
		return "", errors.New("not valid UTF-8")
	}
	switch {
	case s == "" || strings.HasPrefix(s, "#"):
		return "", nil
	case strings.HasPrefix(s, "{"):
		var row struct {
			Prompt *string `json:"prompt"`
		}
		if err := json.Unmarshal([]byte(s), &row); err != nil {
			return "", fmt.Errorf("a line starting with { must be a JSON object: %v", err)
		}
		if row.Prompt == nil || strings.TrimSpace(*row.Prompt) == "" {
			return "", errors.New(`the JSON object has no "prompt" text`)
		}
		return strings.TrimSpace(*row.Prompt), nil
	}
	return s, nil
}

var errLineTooLong = errors.New("line too long")

// readLine reads up to the next newline (dropped), refusing lines over limit
// bytes without holding more than that. At the end of input it returns the
// last line with io.EOF.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		n := len(line) + len(chunk)
		if err == nil {
			n-- // the newline
		}
		if n > limit {
			return nil, errLineTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return line, err
		}
	}
}
