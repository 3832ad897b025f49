#!/usr/bin/env bash
# Tags a release of every module in this repository at HEAD, as the go
# command expects of a multi-module repository: VERSION for the root
# module, DIR/VERSION for the module in DIR (redis/v0.1.0, ...).
#
#   ./scripts/release.sh [-n] VERSION
#
# It refuses unless the tree is clean, VERSION is a semantic version, no
# tag exists yet, and every module's requirements on its siblings name
# VERSION (a replace directive is ignored by a module's users, so the
# requirement itself is what they get). It then runs the proof that a
# program outside the repository builds from the modules at VERSION
# (TestUserBuildsFromProxy), and creates annotated tags. With -n it checks
# and prints the commands instead of running the proof and tagging.
# It never pushes: see doc/release.md.
set -euo pipefail
cd "$(dirname "$0")/.."

dry=false
if [ "${1:-}" = "-n" ]; then
	dry=true
	shift
fi
if [ $# -ne 1 ]; then
	echo "usage: $0 [-n] VERSION" >&2
	exit 2
fi
version=$1
fail() { echo "release: $*" >&2; exit 1; }

# Below v2: a v2 module path would need a /v2 suffix.
[[ $version =~ ^v[01]\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
	fail "$version is not vMAJOR.MINOR.PATCH with major 0 or 1"

if [ -n "$(git status --porcelain)" ]; then
	git status --short >&2
	fail "the tree is not clean: commit or remove the changes above"
fi

# Every module git tracks, with its path.
dirs=()
paths=()
while IFS= read -r gomod; do
	dirs+=("$(dirname "$gomod")")
	paths+=("$(go mod edit -print "$gomod" | awk '$1 == "module" { print $2; exit }')")
done < <(git ls-files 'go.mod' '*/go.mod')
[ ${#dirs[@]} -gt 0 ] || fail "git tracks no go.mod"

# requirements GOMOD prints "path version" for each require line.
requirements() {
	go mod edit -print "$1" | awk '
		/^require \($/ { block = 1; next }
		block && /^\)$/ { block = 0; next }
		block { print $1, $2; next }
		$1 == "require" { print $2, $3 }'
}

bad=0
siblings=0
for i in "${!dirs[@]}"; do
	while read -r path v; do
		for p in "${paths[@]}"; do
			[ "$path" = "$p" ] || continue
			siblings=$((siblings + 1))
			if [ "$v" != "$version" ]; then
				echo "${dirs[$i]}/go.mod requires $path $v, want $version" >&2
				bad=1
			fi
		done
	done < <(requirements "${dirs[$i]}/go.mod")
done
[ "$bad" = 0 ] || fail "set the requirements above to $version (go mod edit -require=PATH@$version in each module)"
[ "$siblings" -gt 0 ] || fail "no module requires a sibling: nothing ties the modules to $version"

tags=()
for dir in "${dirs[@]}"; do
	if [ "$dir" = . ]; then tag=$version; else tag=$dir/$version; fi
	if git rev-parse -q --verify "refs/tags/$tag" >/dev/null; then
		fail "tag $tag exists already"
	fi
	tags+=("$tag")
done
commit=$(git rev-parse HEAD)
echo "modules: ${paths[*]}"
echo "$siblings requirements between them name $version; tagging $commit"

proof=(go test -count=1 -run '^TestUserBuildsFromProxy$' ./internal/modproxy)
if $dry; then
	echo "${proof[*]}"
else
	"${proof[@]}"
fi
for tag in "${tags[@]}"; do
	cmd=(git tag -a -m "holdfast ${tag}" "$tag" "$commit")
	if $dry; then
		printf '%q ' "${cmd[@]}"
		echo
	else
		"${cmd[@]}"
		echo "tagged $tag"
	fi
done
if ! $dry; then
	echo "push them with: git push origin ${tags[*]}"
fi
