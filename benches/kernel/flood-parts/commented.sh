# ours.sh with a comment on every rule, the hook's jump too, as nodeport-guard writes them: on
# iptables-nft 1.8.9 each `-m comment` is an xt compatibility match the packet passes.
. "$(dirname "$0")/common.sh"
{
  printf '*raw\n:npg-PREROUTING - [0:0]\n:npg-syn-denied - [0:0]\n'
  cat <<'RULES'
-A npg-PREROUTING ! -i lo -p tcp -m comment --comment "npg:0000000000000000 TCP SYN that pre-DNAT policy denies" -m tcp --dport 30008 --tcp-flags SYN,ACK SYN -m set ! --match-set flood-sources src -g npg-syn-denied
-A npg-syn-denied -m comment --comment "npg:1111111111111111 policy a-guard ingress rule 1" -j NFLOG --nflog-prefix "DPI1|a-guard" --nflog-group 1 --nflog-size 80 --nflog-threshold 1
-A npg-syn-denied -m comment --comment "npg:2222222222222222 policy a-guard ingress rule 1" -j DROP
-I PREROUTING 1 -m comment --comment "npg:3333333333333333" -j npg-PREROUTING
RULES
  printf 'COMMIT\n'
} | iptables-nft-restore --noflush
