with

attempts as (

    -- Calls without a model (tools, agents) have no model to storm on.
    select * from {{ ref('int_retry_chains') }}
    where model is not null

),

attempts_by_minute as (

    select
        event_date,
        tenant_id,
        model,
        date_trunc('minute', requested_at) as minute_start,
        count(*) filter (where is_retry) as retries,
        count(*) filter (where not is_retry) as first_attempts

    from attempts
    group by event_date, tenant_id, model, minute_start

)

select * from attempts_by_minute
