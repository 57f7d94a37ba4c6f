# %preun of the nodeport-guard RPM ($1: 0 on removal, 1 on upgrade), doing what the Debian
# package's prerm does. On removal: stop and disable both units, then remove the firewall rules
# while the binary is still here (the daemon leaves them in place when it stops, so that
# restarts and upgrades never open a gap; once the binary is gone nothing could take out the
# npg-* chains, jumps and sets). Upgrades keep the daemon running and the rules in place.
if [ "$1" -eq 0 ]; then
    if command -v systemctl >/dev/null 2>&1; then
        systemctl --no-reload disable --now nodeport-guard.service nodeport-guard-reapply.service >/dev/null 2>&1 || :
    fi
    if [ -x /usr/bin/nodeport-guard ]; then
        if ! /usr/bin/nodeport-guard cleanup --yes; then
            echo "nodeport-guard: could not remove its firewall rules; remove the npg-* chains and sets by hand" >&2
        fi
    fi
fi
exit 0
