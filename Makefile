# Two entry points for a fresh machine; both set up everything they need.
#   make demo   serve the bundled synthetic web on loopback and crawl it (no internet needed)
#   make test   run the whole test suite (unit, property, Beam and end-to-end crawls)
#   make bench  benchmarks side by side with Scrapy (not tests: they print figures)
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# Test processes: the end-to-end crawls mostly wait on politeness delays, so two workers on two
# cores nearly halve the suite. Each test file runs whole in one worker (its module fixtures,
# such as a shared crawl, are made once), and each worker starts its own emulators.
TEST_WORKERS ?= 2

.PHONY: demo test bench lint clean browser

# The synthetic web is a distribution of its own (testweb/pyproject.toml), kept out of the
# crawler's wheel and image; a checkout installs both.
$(BIN)/crawler: pyproject.toml testweb/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]' -e ./testweb
	@touch $@

demo: $(BIN)/crawler
	$(BIN)/crawler demo

test: $(BIN)/crawler browser
	$(BIN)/ruff check pipeline testweb tests bench examples
	$(BIN)/pytest -q -ra -n $(TEST_WORKERS) --dist loadfile

# Debian's headless Chromium for the status page's browser test (Playwright drives it; it never
# downloads a browser of its own). Installed with apt-get where missing (CI runs as root on
# Debian); where that cannot be done the test says chromium is absent and skips (under CI=true,
# where the browser must be there, it fails instead).
browser:
	@test -x /usr/bin/chromium || { \
	  echo "installing chromium (Debian) for tests/test_status_page.py"; \
	  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q chromium >/dev/null; } || \
	  echo "chromium could not be installed: tests/test_status_page.py will skip"

bench: $(BIN)/crawler
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench $(BENCH_ARGS)

lint: $(BIN)/crawler
	$(BIN)/ruff check pipeline testweb tests bench examples

clean:
	rm -rf $(VENV) crawl-out .pytest_cache .ruff_cache
