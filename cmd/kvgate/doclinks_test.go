package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// README sends readers into docs/ section by section, so a moved or renamed
// heading would strand them. Every relative link of README and docs/*.md
// names a file that exists and, where it has a #fragment, a heading of that
// file (GitHub's anchor for it).
func TestReadmeDocLinksResolve(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{"../../README.md"}, docs...)
	anchors := map[string]map[string]bool{}
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, link := range markdownLinks(string(b)) {
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			target, frag, _ := strings.Cut(link, "#")
			file := path
			if target != "" {
				file = filepath.Join(filepath.Dir(path), target)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s links to %s, which does not exist", path, link)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			if anchors[file] == nil {
				text, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				anchors[file] = headingAnchors(string(text))
			}
			if !anchors[file][frag] {
				t.Errorf("%s links to %s: %s has no such heading", path, link, file)
			}
		}
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// markdownLinks returns the targets of the inline links outside code blocks.
func markdownLinks(doc string) []string {
	var links []string
	for _, line := range proseLines(doc) {
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			links = append(links, m[1])
		}
	}
	return links
}

// headingAnchors returns the anchors GitHub gives a document's headings:
// lower case, punctuation other than '-' and '_' dropped, spaces made '-',
// a repeated anchor suffixed -1, -2, ...
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	for _, line := range proseLines(doc) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchor := b.String()
		for i, a := 1, anchor; ; i++ {
			if !out[a] {
				out[a] = true
				break
			}
			a = anchor + "-" + strconv.Itoa(i)
		}
	}
	return out
}

// proseLines returns the lines of doc outside fenced code blocks.
func proseLines(doc string) []string {
	var lines []string
	fenced := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines = append(lines, line)
		}
	}
	return lines
}
