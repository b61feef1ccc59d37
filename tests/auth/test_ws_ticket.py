"""The WebSocket ticket book (:mod:`coremetry.auth.ws_ticket`): single use, lifetime, bounds."""

import pytest

from coremetry.auth import ExpiredToken, InvalidToken, TicketBook, TicketLimit
from coremetry.auth.ws_ticket import MAX_TTL_S


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


HEADERS = {
    "authorization": "Bearer cmk_abc",
    "cookie": "coremetry_session=xyz",
    "x-other": "not kept",
}


def test_a_ticket_is_redeemed_once_for_the_minting_credential_headers() -> None:
    book = TicketBook(clock=Clock())
    ticket = book.mint("token:a", HEADERS)
    assert len(ticket.value) >= 43  # 32 random bytes, URL-safe base64
    assert ticket.value.replace("-", "").replace("_", "").isalnum()
    assert book.redeem(ticket.value) == (
        (b"authorization", b"Bearer cmk_abc"),
        (b"cookie", b"coremetry_session=xyz"),
    )
    with pytest.raises(InvalidToken) as reused:
        book.redeem(ticket.value)
    assert "already used" in reused.value.reason
    assert ticket.value not in reused.value.reason


def test_tickets_are_distinct_and_unknown_or_malformed_ones_are_refused() -> None:
    book = TicketBook(clock=Clock())
    values = {book.mint("token:a", HEADERS).value for _ in range(20)}
    assert len(values) == 20
    for bad in ("", "x" * 500, "not-minted-here"):
        with pytest.raises(InvalidToken):
            book.redeem(bad)


def test_a_ticket_expires_after_its_lifetime() -> None:
    clock = Clock()
    book = TicketBook(ttl_s=10, clock=clock)
    early, late = book.mint("token:a", HEADERS), book.mint("token:a", HEADERS)
    clock.now += 9.9
    assert book.redeem(early.value)
    clock.now += 0.1
    with pytest.raises(ExpiredToken):
        book.redeem(late.value)
    assert len(book) == 0  # expired tickets are dropped


def test_unused_tickets_are_bounded_per_identity_and_in_all() -> None:
    clock = Clock()
    book = TicketBook(ttl_s=10, max_per_subject=2, max_tickets=3, clock=clock)
    book.mint("token:a", HEADERS)
    clock.now += 4
    book.mint("token:a", HEADERS)
    with pytest.raises(TicketLimit) as per_subject:
        book.mint("token:a", HEADERS)
    assert per_subject.value.retry_after_s == pytest.approx(6)
    book.mint("token:b", HEADERS)
    with pytest.raises(TicketLimit):
        book.mint("token:c", HEADERS)
    clock.now += 6  # the first one expired: room again
    assert book.mint("token:c", HEADERS).value


@pytest.mark.parametrize("ttl_s", [0, -1, MAX_TTL_S + 1, float("nan")])
def test_the_lifetime_is_at_most_a_minute(ttl_s: float) -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        TicketBook(ttl_s=ttl_s)
