{#-
    The retry chains, defined once for the marts that read them (retry_storms, retry_policy): every
    request of the built days with its chain (coalesce(retry_of, request_id): a retry names its
    chain's first attempt), its place in the chain (attempts in start order) and the previous
    attempt's HTTP status. Chains are read from the day before each built day too, so a chain begun
    before midnight numbers its attempts after midnight right.
-#}
with

requests as (

    select * from {{ ref('stg_dwd__requests') }}
    where {{ in_build_days('event_date', days_before=1) }}

),

chained as (

    select
        *,
        coalesce(retry_of_request_id, request_id) as chain_id

    from requests

),

attempts as (

    select
        event_date,
        tenant_id,
        model,
        request_id,
        chain_id,
        row_number() over chain_in_order as attempt_number,
        lag(status_code) over chain_in_order as previous_status_code,
        is_retry,
        status_code,
        requested_at,
        input_tokens,
        output_tokens,
        inference_ms,
        cost_usd

    from chained
    window chain_in_order as (partition by chain_id order by requested_at, request_id)

)

select * from attempts
where {{ in_build_days('event_date') }}
