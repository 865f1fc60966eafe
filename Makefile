# Makefile for the idempotency PostgreSQL extension (PGXS).
#
# The version lives in idempotency.control only.  The current version's
# install script is assembled from the sources below into
# build/idempotency--$(EXTVERSION).sql.  Installed as they are: the frozen
# scripts of released versions, sql/released/idempotency--*.sql (never
# edited: sql/released/SHA256SUMS), and the upgrade to the current version,
# sql/idempotency--A--$(EXTVERSION).sql, until its release freezes it.
#
# This file must parse without pg_config (a fresh machine has none yet):
# `make demo` and `make test` install what is missing first.

EXTENSION = idempotency
EXTVERSION := $(shell sed -n "s/^default_version *= *'\([^']*\)'.*/\1/p" $(dir $(lastword $(MAKEFILE_LIST)))idempotency.control)

MODULE_big = idempotency
OBJS = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c)))

# Sources of the current version's install script: the core first, then
# one file per concern (sql/idempotency_<concern>.sql) in name order.
SQL_SOURCES = sql/idempotency.sql $(sort $(wildcard sql/idempotency_*.sql))

DATA_built = build/idempotency--$(EXTVERSION).sql
DATA = $(wildcard sql/released/idempotency--*.sql sql/idempotency--*.sql)

REGRESS = $(sort $(notdir $(basename $(wildcard test/sql/*.sql))))
REGRESS_OPTS = --inputdir=test --load-extension=$(EXTENSION)
ISOLATION = $(sort $(notdir $(basename $(wildcard test/specs/*.spec))))
ISOLATION_OPTS = --inputdir=test --load-extension=$(EXTENSION)
TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

# Warnings are errors; the flags PostgreSQL's own headers trip are silenced.
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers \
	-Wno-sign-compare -Wno-cast-function-type

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)

.PHONY: demo test test-examples test-matrix lint bench soak sanitize deb mutate portable tle dbdev test-portable portable-always

# The portable edition (SQL and PL/pgSQL, for managed PostgreSQL; see
# docs/managed.md), generated from SQL_SOURCES and sql/portable/ by
# sql/portable/generate.pl (perl only: no pg_config, no compiler).
#   make portable  build/portable/idempotency-portable--$(EXTVERSION).sql, the
#                  plain script (installs into the schema idempotency.install_schema
#                  names), and build/portable/idempotency--$(EXTVERSION).sql, the
#                  extension script it wraps
#                  and build/portable/idempotency-portable--A--B.sql, the plain
#                  script's upgrade for each upgrade idempotency--A--B.sql of
#                  the C edition from 0.5.0 on (generate.pl upgrade-list; frozen
#                  in sql/released/portable/ once B is released)
#   make tle       build/tle/idempotency--pgtle.sql, for a role in pgtle_admin
#                  (this version and every upgrade path)
#   make dbdev     build/dbdev/idempotency/, the database.dev package (Supabase):
#                  control file, install and upgrade scripts, README.md; publish
#                  it with `dbdev publish --path build/dbdev/idempotency`
#   make test-portable  test/scripts/portable.sh: both against PostgreSQL 15 (or the
#                  plain script against PORTABLE_PG_CONFIG's), upgrades, pg_cron,
#                  and the catalog parity with the C edition
# Released scripts are never edited: sql/released/SHA256SUMS lists them,
# every run of generate.pl checks them; after a deliberate fix in place:
#   perl sql/portable/generate.pl sum sql/released/idempotency--A--B.sql
PORTABLE_GEN = perl sql/portable/generate.pl
# A--B of every portable upgrade (empty when generate.pl fails: then so
# does every rule below, with its message).
PORTABLE_UPGRADES := $(shell perl $(dir $(lastword $(MAKEFILE_LIST)))sql/portable/generate.pl upgrade-list 2>/dev/null)
PORTABLE_PLAIN_UPGRADES = $(patsubst %,build/portable/idempotency-portable--%.sql,$(PORTABLE_UPGRADES))
# Always regenerated (under a second): a deleted body must fail the build.
PORTABLE_DEPS = $(SQL_SOURCES) $(wildcard sql/portable/*.sql) sql/portable/exceptions.txt \
	$(DATA) $(wildcard sql/portable/upgrade/*.sql sql/released/SHA256SUMS sql/released/portable/*.sql) \
	sql/portable/generate.pl idempotency.control portable-always

# `make` with no target builds the extension when PGXS is available.
ifneq ($(wildcard $(PGXS)),)
include $(PGXS)
ifeq ($(filter $(MAJORVERSION),15 16 17 18 19),)
$(error idempotency supports PostgreSQL 15 to 19; $(PG_CONFIG) is PostgreSQL $(VERSION))
endif
else
all:
	@echo "pg_config or the PostgreSQL server headers are missing."
	@echo "Run 'make test' or 'make demo' (as root they install them), or:"
	@echo "  apt-get install -y postgresql-15 postgresql-server-dev-15"
	@exit 1
endif

build/idempotency--$(EXTVERSION).sql: $(SQL_SOURCES) idempotency.control
	@mkdir -p build
	cat $(SQL_SOURCES) > $@

$(OBJS): $(wildcard src/*.h)

portable: build/portable/idempotency-portable--$(EXTVERSION).sql build/portable/idempotency--$(EXTVERSION).sql \
	$(PORTABLE_PLAIN_UPGRADES)
tle: build/tle/idempotency--pgtle.sql

# Written to a temporary file first, so that a failed generation leaves none.
build/portable/idempotency--$(EXTVERSION).sql: $(PORTABLE_DEPS)
	@mkdir -p build/portable
	$(PORTABLE_GEN) ext $(SQL_SOURCES) > $@.tmp && mv $@.tmp $@ || { rm -f $@.tmp $@; exit 1; }

build/portable/idempotency-portable--$(EXTVERSION).sql: $(PORTABLE_DEPS)
	@mkdir -p build/portable
	$(PORTABLE_GEN) plain $(SQL_SOURCES) > $@.tmp && mv $@.tmp $@ || { rm -f $@.tmp $@; exit 1; }

build/tle/idempotency--pgtle.sql: $(PORTABLE_DEPS)
	@mkdir -p build/tle
	$(PORTABLE_GEN) tle $(SQL_SOURCES) > $@.tmp && mv $@.tmp $@ || { rm -f $@.tmp $@; exit 1; }

$(PORTABLE_PLAIN_UPGRADES): build/portable/idempotency-portable--%.sql: $(PORTABLE_DEPS)
	@mkdir -p build/portable
	$(PORTABLE_GEN) plain-upgrade $* > $@.tmp && mv $@.tmp $@ || { rm -f $@.tmp $@; exit 1; }

# The database.dev package: one directory as `dbdev publish` reads it
# (HANDLE in README.md: the publisher's handle on database.dev).
DBDEV_HANDLE ?= HANDLE
DBDEV_DIR = build/dbdev/idempotency
dbdev: portable-always
	@rm -rf $(DBDEV_DIR) $(DBDEV_DIR).tmp && mkdir -p $(DBDEV_DIR).tmp
	$(PORTABLE_GEN) dbdev-control > $(DBDEV_DIR).tmp/idempotency.control
	$(PORTABLE_GEN) dbdev $(SQL_SOURCES) > $(DBDEV_DIR).tmp/idempotency--$(EXTVERSION).sql
	@for p in $(PORTABLE_UPGRADES); do \
	    echo "$(PORTABLE_GEN) dbdev-upgrade $$p > $(DBDEV_DIR).tmp/idempotency--$$p.sql"; \
	    $(PORTABLE_GEN) dbdev-upgrade $$p > $(DBDEV_DIR).tmp/idempotency--$$p.sql || exit 1; \
	done
	sed -e 's/@VERSION@/$(EXTVERSION)/g' -e 's/@HANDLE@/$(DBDEV_HANDLE)/g' sql/portable/dbdev/README.md > $(DBDEV_DIR).tmp/README.md
	@mv $(DBDEV_DIR).tmp $(DBDEV_DIR)

test-portable:
	@bash test/scripts/portable.sh

portable-always:

demo:
	@PG_CONFIG=$(PG_CONFIG) bash test/scripts/demo.sh

# make test TESTS="claim_basic lease_race": only these tests (CONTRIBUTING.md)
test:
	@PG_CONFIG=$(PG_CONFIG) TESTS="$(TESTS)" bash test/scripts/run.sh $(SUITES)

# The client examples with every toolchain they need (installed as root
# when missing: Python with psycopg2, a JDK with the JDBC driver, Node and
# npm); make test runs only those whose toolchain is present.
test-examples:
	@PG_CONFIG=$(PG_CONFIG) IDEM_EXAMPLES=1 bash test/scripts/run.sh examples

# Every suite on PostgreSQL 15 to 19 (test/scripts/matrix.sh says how to choose).
test-matrix:
	@bash test/scripts/matrix.sh

# cppcheck and clang-tidy on src/, the SQL security lint of every shipped
# SQL and PL/pgSQL line (test/scripts/sqllint.pl, PostgreSQL's own parser in
# a throwaway cluster; docs/security.md) and the shape of src/.
# LINT_TOOLS="sql" make lint runs only some of them.
lint:
	@PG_CONFIG=$(PG_CONFIG) bash test/scripts/lint.sh

bench:
	@PG_CONFIG=$(PG_CONFIG) bash bench/run.sh

# How many seeded bugs the suites catch (test/mutants/mutants.txt).
mutate:
	@PG_CONFIG=$(PG_CONFIG) bash test/scripts/mutate.sh

soak:
	@PG_CONFIG=$(PG_CONFIG) bash test/scripts/soak.sh

sanitize:
	@PG_CONFIG=$(PG_CONFIG) bash test/scripts/sanitize.sh

# `make deb`: build/deb/postgresql-NN-idempotency_*.deb via dpkg-buildpackage in a throwaway copy (tested by test/scripts/deb.sh).
DEB_DIR = build/deb
DEB_SRC = $(DEB_DIR)/src/idempotency-$(EXTVERSION)
deb:
	@for t in dpkg-buildpackage dh pg_buildext; do command -v $$t >/dev/null || { \
		echo "make deb needs $$t: apt-get install -y build-essential dpkg-dev debhelper postgresql-server-dev-all" >&2; exit 1; }; done
	@v=$$(dpkg-parsechangelog -l debian/changelog -S Version) || exit 1; \
	if [ "$${v%-*}" != "$(EXTVERSION)" ]; then \
		echo "debian/changelog is at $$v but idempotency.control at $(EXTVERSION): add a debian/changelog entry $(EXTVERSION)-1 (dch -v $(EXTVERSION)-1)" >&2; exit 1; fi
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_SRC)
	tar --exclude=./.git --exclude=./build --exclude=./results --exclude=./tmp_check --exclude=./output_iso \
		--exclude=./log --exclude=node_modules --exclude='*.o' --exclude='*.bc' --exclude='*.so' -cf - . \
		| tar -C $(DEB_SRC) -xf -
	cd $(DEB_SRC) && export PG_SUPPORTED_VERSIONS=$${PG_SUPPORTED_VERSIONS:-installed} && \
		pg_buildext updatecontrol && dpkg-buildpackage -us -uc -b
	mv $(DEB_DIR)/src/*.deb $(DEB_DIR)/src/*.buildinfo $(DEB_DIR)/src/*.changes $(DEB_DIR)/
	rm -rf $(DEB_DIR)/src
	@ls -1 $(DEB_DIR)/*.deb
