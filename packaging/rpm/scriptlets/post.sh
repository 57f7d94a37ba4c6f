# %post of the nodeport-guard RPM ($1: 1 on install, 2 on upgrade), doing what the Debian
# package's postinst does: enable both units on install, and start the daemon then (the reapply
# unit is only enabled, hooked into nftables.service and friends; it is never started here).
# On upgrade, %postun restarts the daemon once the new files are in place.
if command -v systemctl >/dev/null 2>&1; then
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload >/dev/null 2>&1 || :
    fi
    if [ "$1" -eq 1 ]; then
        systemctl enable nodeport-guard.service nodeport-guard-reapply.service >/dev/null 2>&1 || :
        if [ -d /run/systemd/system ]; then
            systemctl start nodeport-guard.service || :
        fi
    fi
fi
exit 0
