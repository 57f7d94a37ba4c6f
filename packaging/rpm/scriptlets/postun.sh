# %postun of the nodeport-guard RPM ($1: 0 after removal, 1 after an upgrade): systemd rereads
# the units, and after an upgrade the daemon restarts with the new binary, as the Debian
# package restarts it after an upgrade (not before: the rules stay in place while it is down).
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
    if [ "$1" -ge 1 ]; then
        systemctl try-restart nodeport-guard.service >/dev/null 2>&1 || :
    fi
fi
exit 0
