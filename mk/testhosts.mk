# Debian packages for the multi-node tests (tests/multinode), which build real test
# hosts as network namespaces: OpenSSH's server and client, Slurm with munge, Open MPI,
# rsync (%dist_sync).
# Installed when we are root and one is missing; otherwise those tests skip and say why.

TESTHOST_PKGS := openssh-server openssh-client slurm-wlm munge openmpi-bin iproute2 util-linux rsync
TESTHOST_BINS := sshd ssh ssh-keygen slurmctld slurmd munged sbatch mpiexec orted ip nsenter unshare rsync

.PHONY: testhosts

testhosts:
	@missing=""; for b in $(TESTHOST_BINS); do \
		PATH="$$PATH:/usr/sbin:/sbin" command -v $$b >/dev/null 2>&1 || missing="$$missing $$b"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
		echo "installing the multi-node test hosts' packages (missing:$$missing)"; \
		$(APT_GET) update -qq && DEBIAN_FRONTEND=noninteractive $(APT_GET) install -y -qq \
			--no-install-recommends $(TESTHOST_PKGS) >/dev/null; \
	else \
		echo "multi-node tests will skip: they need root and$$missing (apt-get install $(TESTHOST_PKGS))"; \
	fi
