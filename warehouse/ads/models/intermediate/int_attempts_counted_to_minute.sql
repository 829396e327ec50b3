with

requests as (

    select * from {{ ref('stg_dwd__requests') }}
    where {{ in_build_days('event_date') }}

),

attempts_by_minute as (

    select
        event_date,
        tenant_id,
        model,
        date_trunc('minute', requested_at) as minute_start,
        count(*) filter (where is_retry) as retries,
        count(*) filter (where not is_retry) as first_attempts

    from requests
    group by event_date, tenant_id, model, minute_start

)

select * from attempts_by_minute
