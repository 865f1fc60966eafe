#!/usr/bin/env bash
# The commit style, checked on every commit made since it was adopted
# (CONTRIBUTING.md): a subject of at most 72 characters, in the
# imperative, without a trailing period, and a body that says why.
# Merge commits are exempt.  Run by `make lint`; prints one line per
# offending commit and exits 1 when there is any.
#
#   IDEM_COMMITS_BASE=REV   check REV..HEAD instead (default: the commit
#                           that adopted the style, below)
# Outside a git checkout (a release tarball), or in a shallow clone
# without the base commit, it says so and checks nothing.
set -u
cd "$(dirname "$0")/../.." || exit 1

# The last commit before `make lint` checked the style; later ones are.
base=${IDEM_COMMITS_BASE:-a51cc5159294de64d727d6ee4da70ce9a9c094f7}

if ! git rev-parse --git-dir >/dev/null 2>&1; then
    echo "commits: not a git checkout, nothing to check"
    exit 0
fi
if ! git cat-file -e "$base^{commit}" 2>/dev/null; then
    echo "commits: $base is not in this clone (shallow?), nothing to check"
    exit 0
fi

bad=0
while IFS= read -r c; do
    subject=$(git log -1 --format=%s "$c")
    body=$(git log -1 --format=%b "$c" | sed '/^[[:space:]]*$/d')
    short=$(git rev-parse --short "$c")
    problems=()
    [ "${#subject}" -le 72 ] || problems+=("subject of ${#subject} characters (at most 72)")
    case $subject in *.) problems+=("subject ends with a period");; esac
    # A lower-case start is a path or area prefix ("docs/http.md: ...") or wrong.
    case $subject in [a-z]*) [[ $subject =~ ^[a-z0-9_./-]+:\  ]] || problems+=("subject starts in lower case");; esac
    first=${subject%% *}
    case $first in
    Added|Adds|Adding|Fixed|Fixes|Fixing|Moved|Moves|Updated|Updates|Removed|Removes|Changed|Changes|Made|Makes|Renamed|Renames|Improved|Improves)
        problems+=("subject does not start with an imperative verb ('$first')");;
    esac
    [ -n "$body" ] || problems+=("no body saying why")
    if [ "$(grep -ciE '\bissues? #?[0-9]+\b' <<<"$subject$body")" -gt 0 ]; then
        problems+=("names an issue number (users cannot see the tracker)")
    fi
    if [ ${#problems[@]} -gt 0 ]; then
        bad=$((bad + 1))
        printf 'commits: %s "%s": %s\n' "$short" "$subject" "$(IFS=';'; echo "${problems[*]}")"
    fi
done < <(git rev-list --no-merges "$base..HEAD")

n=$(git rev-list --no-merges --count "$base..HEAD")
if [ "$bad" -gt 0 ]; then
    echo "commits: $bad of $n commits since $base break the commit style (CONTRIBUTING.md)"
    exit 1
fi
echo "commits: $n commits since $base keep the commit style"
